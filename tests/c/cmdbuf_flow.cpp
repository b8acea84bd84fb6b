// The same flow compiled as C++17: the header and the calls XLA makes must work from C++ with
// the HIP headers included too.
#include "cmdbuf_flow.c"
