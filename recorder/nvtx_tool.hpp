// The one way the recorder includes NVTX. A tool must see NVTX's types and callback tables but
// must never compile NVTX's own implementation (its hidden globals and the injection loader): that
// would make the recorder a second NVTX client inside the process it is observing.
#pragma once

#ifndef NVTX_NO_IMPL
#define NVTX_NO_IMPL
#endif
#include <nvtx3/nvToolsExt.h>
