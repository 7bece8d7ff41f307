// The proof of a descriptor of ours before each use (common/own_descriptor.hpp): once the
// program has closed our number and opened a file of its own there, nothing of ours reaches that
// file — no write, no close — and a descriptor moved high is out of reach of the program's opens.
#include "own_descriptor.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

using ferrum_replay::common::OwnDescriptor;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/own-descriptor-XXXXXX";
    REQUIRE(mkdtemp(name));
    path = name;
  }
  ~TempDir() {
    const std::string command = "rm -rf '" + path + "'";
    (void)!system(command.c_str());
  }
  int open(const char *name) const {
    return ::open((path + "/" + name).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  }
  off_t size(const char *name) const {
    struct stat st {};
    return ::stat((path + "/" + name).c_str(), &st) == 0 ? st.st_size : -1;
  }
};

}  // namespace

TEST_CASE("a number the program took over is neither written nor closed") {
  TempDir dir;
  OwnDescriptor ours(dir.open("ours"));
  REQUIRE(ours);
  const int number = ours.get();
  CHECK(ours.write_all("abc", 3) == 0);
  CHECK(dir.size("ours") == 3);
  // The program closes the number and opens its own file, which takes it.
  ::close(number);
  const int programs = dir.open("program");
  REQUIRE(programs == number);
  CHECK_FALSE(ours.ours());
  CHECK(ours.write_all("def", 3) == EBADF);
  CHECK(dir.size("program") == 0);
  CHECK(ours.close() == EBADF);
  CHECK(::fcntl(programs, F_GETFD) >= 0);  // still open: the program's
  CHECK(::write(programs, "P", 1) == 1);
  ::close(programs);
}

TEST_CASE("a destructor leaves the program's file at our old number open") {
  TempDir dir;
  int number = -1, programs = -1;
  {
    OwnDescriptor ours(dir.open("ours"));
    number = ours.get();
    ::close(number);
    programs = dir.open("program");
    REQUIRE(programs == number);
  }
  CHECK(::fcntl(programs, F_GETFD) >= 0);
  ::close(programs);
}

TEST_CASE("move_high puts it out of reach of the program's next opens, the same file") {
  TempDir dir;
  OwnDescriptor ours(dir.open("ours"));
  const int low = ours.get();
  ours.move_high();
  CHECK(ours.get() > low);
  CHECK(ours.get() >= 32);
  CHECK(::fcntl(low, F_GETFD) == -1);  // the low number given back
  CHECK(ours.write_all("xyz", 3) == 0);
  CHECK(dir.size("ours") == 3);
  const int programs = dir.open("program");
  CHECK(programs != ours.get());
  CHECK(ours.close() == 0);
  ::close(programs);
}

TEST_CASE("a number that was never open is nothing of ours") {
  OwnDescriptor none(-1);
  CHECK_FALSE(none);
  CHECK(none.close() == EBADF);
  OwnDescriptor closed(1000);  // nothing open there
  CHECK_FALSE(closed);
  CHECK(closed.write_all("x", 1) == EBADF);
}

TEST_CASE("a number taken over between our open and the adoption is not adopted with its path") {
  TempDir dir;
  const std::string ours_path = dir.path + "/ours";
  const int number = ::open(ours_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(number >= 0);
  // The program closes it and opens its own file at the number before we take it.
  ::close(number);
  const int programs = dir.open("program");
  REQUIRE(programs == number);
  OwnDescriptor adopted(number, ours_path.c_str());
  CHECK_FALSE(adopted);
  CHECK(adopted.write_all("x", 1) == EBADF);
  CHECK(adopted.close() == EBADF);
  CHECK(::fcntl(programs, F_GETFD) >= 0);  // left open: the program's
  CHECK(dir.size("program") == 0);
  ::close(programs);
  // The file at the path, opened just now: adopted.
  OwnDescriptor fine(::open(ours_path.c_str(), O_RDWR | O_CLOEXEC), ours_path.c_str());
  CHECK(fine);
  CHECK(fine.write_all("y", 1) == 0);
}
