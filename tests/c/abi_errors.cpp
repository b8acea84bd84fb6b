// The same checks compiled as C++17: the header must be usable from C++ (extern "C", no C-only
// constructs).
#include "abi_errors.c"
