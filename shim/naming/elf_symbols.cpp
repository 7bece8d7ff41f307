#include "naming/elf_symbols.hpp"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ferrum_replay::shim {
namespace {

// Bounds on what a module's file may make us read: a symbol table of 16 million entries is
// far beyond any real one (a large executable has a few hundred thousand).
constexpr uint64_t kMaxSymbols = uint64_t{16} << 20;
constexpr size_t kSymbolsPerRead = 40;  // 960 bytes of stack: threads may have the smallest

bool read_at(int fd, void *buffer, size_t size, uint64_t offset) {
  auto *bytes = static_cast<unsigned char *>(buffer);
  while (size > 0) {
    const ssize_t got = pread(fd, bytes, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;  // an error, or a file shorter than its headers say
    bytes += got;
    offset += static_cast<uint64_t>(got);
    size -= static_cast<size_t>(got);
  }
  return true;
}

bool is_function(const ElfW(Sym) & symbol) {
  const unsigned type = ELF64_ST_TYPE(symbol.st_info);
  return (type == STT_FUNC || type == STT_GNU_IFUNC) && symbol.st_shndx != SHN_UNDEF;
}

bool covers(const ElfW(Sym) & symbol, uint64_t address) {
  const uint64_t size = symbol.st_size ? symbol.st_size : 1;
  return address >= symbol.st_value && address - symbol.st_value < size;
}

bool search(int fd, uint64_t file_size, uint64_t address, char *out, size_t out_size) {
  ElfW(Ehdr) header;
  if (!read_at(fd, &header, sizeof header, 0) || memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 ||
      header.e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) ||
      header.e_shentsize != sizeof(ElfW(Shdr)) || header.e_shnum == 0 ||
      header.e_shoff >= file_size)
    return false;
  ElfW(Shdr) symbols{}, names{};
  bool found_table = false;
  for (unsigned i = 0; i < header.e_shnum && !found_table; ++i) {
    ElfW(Shdr) section;
    if (!read_at(fd, &section, sizeof section, header.e_shoff + uint64_t{i} * sizeof section))
      return false;
    if (section.sh_type != SHT_SYMTAB) continue;
    if (section.sh_link >= header.e_shnum || section.sh_entsize != sizeof(ElfW(Sym)) ||
        !read_at(fd, &names, sizeof names,
                 header.e_shoff + uint64_t{section.sh_link} * sizeof names))
      return false;
    symbols = section;
    found_table = true;
  }
  if (!found_table || names.sh_type != SHT_STRTAB) return false;
  const uint64_t count = symbols.sh_size / sizeof(ElfW(Sym));
  if (count > kMaxSymbols || symbols.sh_offset > file_size ||
      symbols.sh_size > file_size - symbols.sh_offset)
    return false;
  ElfW(Sym) batch[kSymbolsPerRead];
  uint32_t best_name = 0;
  bool found = false;
  for (uint64_t first = 0; first < count && !found; first += kSymbolsPerRead) {
    const size_t n =
        static_cast<size_t>(count - first < kSymbolsPerRead ? count - first : kSymbolsPerRead);
    if (!read_at(fd, batch, n * sizeof(ElfW(Sym)), symbols.sh_offset + first * sizeof(ElfW(Sym))))
      return false;
    for (size_t i = 0; i < n; ++i)
      if (is_function(batch[i]) && batch[i].st_name != 0 && covers(batch[i], address)) {
        best_name = batch[i].st_name;
        found = true;
        break;
      }
  }
  if (!found || best_name >= names.sh_size || names.sh_offset > file_size) return false;
  const uint64_t left = names.sh_size - best_name;
  const size_t length = static_cast<size_t>(left < out_size - 1 ? left : out_size - 1);
  if (!read_at(fd, out, length, names.sh_offset + best_name)) return false;
  out[length] = '\0';  // a name longer than `out` is cut: the caller only shows it
  return out[0] != '\0';
}

}  // namespace

bool symtab_function_name(const char *module_path, uintptr_t load_bias, uintptr_t address,
                          char *out, size_t out_size) {
  if (!module_path || !*module_path || out_size < 2 || address < load_bias) return false;
  // Our own descriptor, for the length of this call: O_NONBLOCK so that a path that is not a
  // regular file (a FIFO planted where a module was) is never waited on, checked below.
  const int fd = open(module_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return false;
  struct stat file {};
  const bool found =
      fstat(fd, &file) == 0 && S_ISREG(file.st_mode) &&
      search(fd, static_cast<uint64_t>(file.st_size), address - load_bias, out, out_size);
  close(fd);
  if (!found) out[0] = '\0';
  return found;
}

}  // namespace ferrum_replay::shim
