// NVIDIA's CUDA libraries, by file name: the driver, the runtime, and the libraries that call
// graph APIs on a program's behalf. One list for the two questions asked of it: which frames
// are never a call site a person wrote (call_site.cpp), and which libraries loaded with
// RTLD_DEEPBIND could bind their launches past the shim (loader_hooks.cpp).
#pragma once

#include <string.h>

namespace ferrum_replay::shim {

inline constexpr const char *kNvidiaLibraryPrefixes[] = {"libcuda.",  "libcudart",  "libnvidia-",
                                                         "libcublas", "libcudnn",   "libnccl",
                                                         "libnvrtc",  "libnvinfer", "libtensorrt"};

// The file's base name (after the last '/'); "" for null.
inline const char *file_base_name(const char *path) {
  if (!path) return "";
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

// Whether `path` (a module's file name, with or without directories) is one of them.
inline bool is_nvidia_library(const char *path) {
  const char *base = file_base_name(path);
  for (const char *prefix : kNvidiaLibraryPrefixes)
    if (strncmp(base, prefix, strlen(prefix)) == 0) return true;
  return false;
}

}  // namespace ferrum_replay::shim
