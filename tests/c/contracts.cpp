// The same contracts compiled as C++17: the header and these calls must work from C++ with the
// HIP headers included too.
#include "contracts.c"
