#include "naming/elf_symbols.hpp"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "own_descriptor.hpp"
#include "record_locks.hpp"

namespace ferrum_replay::shim {
namespace {

// Bounds on what a module's file may make us read: a symbol table of 16 million entries is
// far beyond any real one (a large executable has a few hundred thousand).
constexpr uint64_t kMaxSymbols = uint64_t{16} << 20;
constexpr size_t kSymbolsPerRead = 40;  // 960 bytes of stack: threads may have the smallest
constexpr uint64_t kMaxNoteSegment = 64 * 1024;  // a loaded module's notes: a few hundred bytes

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

// Notes are aligned to 4 bytes, or to 8 in a section or segment aligned so (gABI).
size_t note_alignment(uint64_t section_or_segment_alignment) {
  return section_or_segment_alignment == 8 ? 8 : 4;
}

size_t aligned(size_t size, size_t alignment) {
  return (size + alignment - 1) & ~(alignment - 1);
}

// The NT_GNU_BUILD_ID note among the notes of one note section or segment, into `out`.
bool find_build_id(const unsigned char *notes, size_t size, size_t alignment, BuildId &out) {
  size_t at = 0;
  while (size - at >= sizeof(ElfW(Nhdr))) {
    ElfW(Nhdr) note;
    memcpy(&note, notes + at, sizeof note);
    at += sizeof note;
    const size_t name_size = aligned(note.n_namesz, alignment);
    if (name_size > size - at) return false;
    const unsigned char *name = notes + at;
    at += name_size;
    if (note.n_descsz > size - at) return false;
    if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == sizeof "GNU" &&
        memcmp(name, "GNU", sizeof "GNU") == 0) {
      if (note.n_descsz == 0 || note.n_descsz > sizeof out.bytes) return false;
      memcpy(out.bytes, notes + at, note.n_descsz);
      out.size = note.n_descsz;
      return true;
    }
    const size_t description_size = aligned(note.n_descsz, alignment);
    if (description_size > size - at) return false;
    at += description_size;
  }
  return false;
}

// Whether the file carries the build ID `loaded`, in a note section. A build-ID section is 36
// bytes (a 20-byte SHA-1) to 100; larger note sections (properties, ABI tags) are not read.
// Its own frame, apart from the symbol search's buffer: threads may have the smallest stacks.
__attribute__((noinline)) bool file_has_build_id(int fd, const ElfW(Ehdr) & header,
                                                 const BuildId &loaded) {
  for (unsigned i = 0; i < header.e_shnum; ++i) {
    ElfW(Shdr) section;
    if (!read_at(fd, &section, sizeof section, header.e_shoff + uint64_t{i} * sizeof section))
      return false;
    unsigned char notes[256];
    BuildId found;
    if (section.sh_type == SHT_NOTE && section.sh_size <= sizeof notes &&
        read_at(fd, notes, static_cast<size_t>(section.sh_size), section.sh_offset) &&
        find_build_id(notes, static_cast<size_t>(section.sh_size),
                      note_alignment(section.sh_addralign), found))
      return found.size == loaded.size && memcmp(found.bytes, loaded.bytes, found.size) == 0;
  }
  return false;
}

bool search(int fd, uint64_t file_size, const BuildId &loaded, uint64_t address, char *out,
            size_t out_size) {
  ElfW(Ehdr) header;
  if (!read_at(fd, &header, sizeof header, 0) || memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 ||
      header.e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) ||
      header.e_shentsize != sizeof(ElfW(Shdr)) || header.e_shnum == 0 ||
      header.e_shoff >= file_size)
    return false;
  if (loaded.size && !file_has_build_id(fd, header, loaded)) return false;
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

BuildId loaded_build_id(const void *module_start, uintptr_t load_bias) {
  BuildId id;
  if (!module_start) return id;
  // The module's first page: its ELF header and, in every object a linker makes, the program
  // headers right behind it (the loader maps them with the first segment). Anything else —
  // headers elsewhere, odd sizes — is left alone: no ID known.
  constexpr size_t kFirstPage = 4096;
  const auto *start = static_cast<const unsigned char *>(module_start);
  ElfW(Ehdr) header;
  memcpy(&header, start, sizeof header);
  if (memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 ||
      header.e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) ||
      header.e_phentsize != sizeof(ElfW(Phdr)) || header.e_phoff < sizeof header ||
      header.e_phoff > kFirstPage ||
      header.e_phnum > (kFirstPage - header.e_phoff) / sizeof(ElfW(Phdr)))
    return id;
  const unsigned char *table = start + header.e_phoff;
  for (unsigned i = 0; i < header.e_phnum; ++i) {
    ElfW(Phdr) note;
    memcpy(&note, table + i * sizeof note, sizeof note);
    if (note.p_type != PT_NOTE || note.p_memsz > kMaxNoteSegment) continue;
    // Read only where a loaded segment maps the file's bytes.
    bool mapped = false;
    for (unsigned j = 0; j < header.e_phnum && !mapped; ++j) {
      ElfW(Phdr) load;
      memcpy(&load, table + j * sizeof load, sizeof load);
      mapped = load.p_type == PT_LOAD && note.p_vaddr >= load.p_vaddr &&
               note.p_vaddr - load.p_vaddr <= load.p_filesz &&
               note.p_memsz <= load.p_filesz - (note.p_vaddr - load.p_vaddr);
    }
    if (mapped &&
        find_build_id(reinterpret_cast<const unsigned char *>(load_bias + note.p_vaddr),
                      static_cast<size_t>(note.p_memsz), note_alignment(note.p_align), id))
      break;
  }
  return id;
}

bool symtab_function_name(const char *module_path, const BuildId &loaded, uintptr_t load_bias,
                          uintptr_t address, char *out, size_t out_size) {
  if (!module_path || !*module_path || out_size < 2 || address < load_bias) return false;
  // Our own descriptor, for the length of this call: O_NONBLOCK so that a path that is not a
  // regular file (a FIFO planted where a module was) is never waited on, checked below.
  // Read with pread only, and closed only while still ours (own_descriptor.hpp).
  // (Not proved against the path: a library upgraded in place since it was loaded is read from
  // the file opened, then found not to be the one loaded by its build id.)
  // A file the program holds a POSIX record lock on is not opened: closing our descriptor of it
  // would release the program's locks (record_locks.hpp). The frame is then named by its module
  // and offset, as one without a symbol is.
  struct stat named {};
  if (stat(module_path, &named) != 0 || common::may_hold_record_lock(named.st_dev, named.st_ino))
    return false;
  common::OwnDescriptor module(open(module_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!module) return false;
  const int fd = module.get();
  struct stat file {};
  const bool found =
      fstat(fd, &file) == 0 && S_ISREG(file.st_mode) &&
      search(fd, static_cast<uint64_t>(file.st_size), loaded, address - load_bias, out, out_size) &&
      module.ours();
  if (!found) out[0] = '\0';
  return found;
}

}  // namespace ferrum_replay::shim
