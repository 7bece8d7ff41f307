#include "launch_range.hpp"

namespace ferrum {

constinit __attribute__((tls_model("initial-exec"))) thread_local unsigned t_intercept_depth = 0;

}  // namespace ferrum
