#include "launch_range.hpp"

namespace ferrum {

constinit __attribute__((tls_model("initial-exec"))) thread_local unsigned t_launch_depth = 0;

}  // namespace ferrum
