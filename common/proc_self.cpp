#include "proc_self.hpp"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>

namespace ferrum_replay::common {

OwnDescriptor open_process_file(const char *relative, int flags) {
  static const char *const kEntries[] = {"/proc/thread-self/", "/proc/self/"};
  for (const char *entry : kEntries) {
    char path[128];
    const int length = snprintf(path, sizeof path, "%s%s", entry, relative);
    if (length < 0 || static_cast<size_t>(length) >= sizeof path) {
      errno = ENAMETOOLONG;
      return OwnDescriptor();
    }
    const int fd = open(path, flags | O_CLOEXEC);
    // Only a missing entry (an old kernel, or the ended main thread's) is worth the second try.
    if (fd >= 0 || errno != ENOENT) return OwnDescriptor(fd, path, /*follow=*/true);
  }
  return OwnDescriptor();
}

}  // namespace ferrum_replay::common
