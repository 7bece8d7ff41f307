// The module symbol-table reader behind call-site names (shim/naming/elf_symbols.hpp), on files
// made here: the function that covers an address, and every way a file can be short, odd or
// not an ELF file at all — each a plain "not found", never a crash, a wait or a read past the
// buffer.
#include <dlfcn.h>
#include <doctest/doctest.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "naming/elf_symbols.hpp"

using ferrum_replay::shim::BuildId;
using ferrum_replay::shim::loaded_build_id;
using ferrum_replay::shim::symtab_function_name;

namespace {

// An ELF file of this process's class with three sections: none, .symtab, .strtab; and a
// fourth, a build-ID note, when `build_id` is set.
struct ElfImage {
  std::string names = std::string("\0first\0local_fn\0data\0nosize\0", 29);
  std::string build_id;
  std::vector<ElfW(Sym)> symbols;
  ElfW(Ehdr) header{};
  ElfW(Shdr) sections[3]{};

  ElfImage() {
    symbols.push_back(ElfW(Sym){});
    add(1, STT_FUNC, 0x1000, 0x20);  // first
    add(7, STT_FUNC, 0x1100, 0x40);  // local_fn
    add(16, STT_OBJECT, 0x2000, 8);  // data: not a function
    add(21, STT_FUNC, 0x3000, 0);    // nosize: covers its first byte only
    memcpy(header.e_ident, ELFMAG, SELFMAG);
    header.e_ident[EI_CLASS] = sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32;
    header.e_shentsize = sizeof(ElfW(Shdr));
    header.e_shnum = 3;
  }
  void add(uint32_t name, unsigned type, uint64_t value, uint64_t size) {
    ElfW(Sym) symbol{};
    symbol.st_name = name;
    symbol.st_info = static_cast<unsigned char>(ELF64_ST_INFO(STB_LOCAL, type));
    symbol.st_shndx = 1;
    symbol.st_value = value;
    symbol.st_size = size;
    symbols.push_back(symbol);
  }
  // The note as a linker writes it: header, "GNU", the ID, each padded to 4 bytes.
  std::string note() const {
    ElfW(Nhdr) header{4, static_cast<ElfW(Word)>(build_id.size()), NT_GNU_BUILD_ID};
    std::string out(reinterpret_cast<const char *>(&header), sizeof header);
    out.append("GNU\0", 4);
    out += build_id;
    out.resize((out.size() + 3) & ~size_t{3}, '\0');
    return out;
  }
  // Header, then the symbols, the names, the note and the section headers.
  std::string bytes() {
    const size_t symbols_at = sizeof header;
    const size_t names_at = symbols_at + symbols.size() * sizeof(ElfW(Sym));
    const size_t note_at = names_at + names.size();
    const std::string notes = build_id.empty() ? "" : note();
    const size_t sections_at = note_at + notes.size();
    ElfW(Ehdr) h = header;
    h.e_shoff = sections_at;
    ElfW(Shdr) s[4]{};
    memcpy(s, sections, sizeof sections);
    if (!notes.empty()) {
      h.e_shnum = 4;
      s[3].sh_type = SHT_NOTE;
      s[3].sh_offset = note_at;
      s[3].sh_size = notes.size();
      s[3].sh_addralign = 4;
    }
    if (s[1].sh_type == 0) {
      s[1].sh_type = SHT_SYMTAB;
      s[1].sh_link = 2;
      s[1].sh_entsize = sizeof(ElfW(Sym));
    }
    s[1].sh_offset = symbols_at;
    if (s[1].sh_size == 0) s[1].sh_size = symbols.size() * sizeof(ElfW(Sym));
    s[2].sh_type = SHT_STRTAB;
    s[2].sh_offset = names_at;
    s[2].sh_size = names.size();
    std::string out(reinterpret_cast<const char *>(&h), sizeof h);
    out.append(reinterpret_cast<const char *>(symbols.data()), symbols.size() * sizeof(ElfW(Sym)));
    out += names;
    out += notes;
    out.append(reinterpret_cast<const char *>(s), h.e_shnum * sizeof(ElfW(Shdr)));
    return out;
  }
};

struct TempFile {
  std::string path;
  explicit TempFile(const std::string &content) {
    char name[] = "/tmp/ferrum-elf-test.XXXXXX";
    const int fd = mkstemp(name);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()));
    close(fd);
    path = name;
  }
  ~TempFile() { unlink(path.c_str()); }
};

BuildId id_of(const std::string &bytes) {
  BuildId id;
  memcpy(id.bytes, bytes.data(), bytes.size());
  id.size = bytes.size();
  return id;
}

std::string lookup(const std::string &path, uintptr_t bias, uintptr_t address, size_t out_size = 64,
                   const BuildId &loaded = BuildId{}) {
  std::vector<char> out(out_size, 'x');
  if (!symtab_function_name(path.c_str(), loaded, bias, address, out.data(), out.size()))
    return "<none>";
  REQUIRE(memchr(out.data(), '\0', out.size()) != nullptr);
  return out.data();
}

}  // namespace

TEST_CASE("the function symbol that covers an address, by its load bias") {
  TempFile file(ElfImage().bytes());
  CHECK(lookup(file.path, 0, 0x1110) == "local_fn");
  CHECK(lookup(file.path, 0x7000, 0x8110) == "local_fn");
  CHECK(lookup(file.path, 0, 0x1000) == "first");
  CHECK(lookup(file.path, 0, 0x1030) == "<none>");  // between two functions
  CHECK(lookup(file.path, 0, 0x2000) == "<none>");  // an object, not a function
  CHECK(lookup(file.path, 0, 0x3000) == "nosize");
  CHECK(lookup(file.path, 0, 0x3001) == "<none>");
  CHECK(lookup(file.path, 0x7000, 0x10) == "<none>");  // below the module
  CHECK(lookup(file.path, 0, 0x1110, 4) == "loc");     // cut to the buffer, terminated
}

TEST_CASE("a file that is short, odd or no ELF file gives no name") {
  const std::string good = ElfImage().bytes();
  for (size_t cut : {size_t{0}, size_t{10}, sizeof(ElfW(Ehdr)), sizeof(ElfW(Ehdr)) + 30,
                     good.size() - 20, good.size() - 1}) {
    TempFile file(good.substr(0, cut));
    CHECK(lookup(file.path, 0, 0x1110) == "<none>");
  }
  ElfImage wrong_class;
  wrong_class.header.e_ident[EI_CLASS] = sizeof(void *) == 8 ? ELFCLASS32 : ELFCLASS64;
  ElfImage bad_link;
  bad_link.sections[1].sh_type = SHT_SYMTAB;
  bad_link.sections[1].sh_link = 7;
  bad_link.sections[1].sh_entsize = sizeof(ElfW(Sym));
  ElfImage bad_name;
  bad_name.symbols[2].st_name = 0x7fffffff;  // far beyond the string table
  ElfImage huge_table;
  huge_table.sections[1].sh_type = SHT_SYMTAB;
  huge_table.sections[1].sh_link = 2;
  huge_table.sections[1].sh_entsize = sizeof(ElfW(Sym));
  huge_table.sections[1].sh_size = ~uint64_t{0} / 2;  // more than the file holds
  ElfImage bad_entry;
  bad_entry.header.e_shentsize = 12;
  for (ElfImage *image : {&wrong_class, &bad_link, &bad_name, &huge_table, &bad_entry}) {
    TempFile file(image->bytes());
    CHECK(lookup(file.path, 0, 0x1110) == "<none>");
  }
  TempFile text(std::string(4096, 'E'));
  CHECK(lookup(text.path, 0, 0x1110) == "<none>");
  CHECK(lookup("/nonexistent/module.so", 0, 0x1110) == "<none>");
  CHECK(lookup("", 0, 0x1110) == "<none>");
  CHECK(lookup("/tmp", 0, 0x1110) == "<none>");  // a directory
  // A FIFO where a module was: never waited on (nobody writes to it).
  const std::string fifo = "/tmp/ferrum-elf-test-fifo." + std::to_string(getpid());
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(lookup(fifo, 0, 0x1110) == "<none>");
  unlink(fifo.c_str());
}

TEST_CASE("a loaded module's build ID: the file must carry the same one") {
  ElfImage image;
  image.build_id = std::string("\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa", 10);
  TempFile file(image.bytes());
  CHECK(lookup(file.path, 0, 0x1110, 64, id_of(image.build_id)) == "local_fn");
  CHECK(lookup(file.path, 0, 0x1110) == "local_fn");  // nothing known of the loaded module
  // Another build at the path (a library replaced on disk, a relative path after a chdir):
  // its symbols are not the loaded module's.
  CHECK(lookup(file.path, 0, 0x1110, 64, id_of("\x11\x22\x33\x44\x55\x66\x77\x88\x99\xab")) ==
        "<none>");
  CHECK(lookup(file.path, 0, 0x1110, 64, id_of("\x11\x22\x33\x44\x55")) == "<none>");
  TempFile without(ElfImage().bytes());  // a file with no build ID at all
  CHECK(lookup(without.path, 0, 0x1110, 64, id_of(image.build_id)) == "<none>");
  // A note that claims more than its section holds is no ID.
  ElfImage broken = image;
  std::string bytes = broken.bytes();
  const size_t at = bytes.find("GNU", sizeof(ElfW(Ehdr))) - sizeof(ElfW(Nhdr));
  ElfW(Word) huge = 0x7fffffff;
  memcpy(&bytes[at + offsetof(ElfW(Nhdr), n_descsz)], &huge, sizeof huge);
  TempFile broken_file(bytes);
  CHECK(lookup(broken_file.path, 0, 0x1110, 64, id_of(image.build_id)) == "<none>");
}

namespace {
__attribute__((noinline)) int local_probe_function(int x) {
  asm volatile("" ::: "memory");
  return x + 1;
}
}  // namespace

TEST_CASE("this test program's own build ID, read from memory, matches its file") {
  Dl_info info{};
  link_map *map = nullptr;
  const auto address = reinterpret_cast<uintptr_t>(&local_probe_function);
  REQUIRE(dladdr1(reinterpret_cast<void *>(address), &info, reinterpret_cast<void **>(&map),
                  RTLD_DL_LINKMAP));
  REQUIRE(map != nullptr);
  const BuildId loaded = loaded_build_id(info.dli_fbase, map->l_addr);
  REQUIRE(loaded.size > 0);  // the toolchain links with --build-id (gcc and clang here do)
  CHECK(lookup("/proc/self/exe", map->l_addr, address, 64, loaded).find("local_probe_function") !=
        std::string::npos);
  BuildId other = loaded;
  other.bytes[0] ^= 1;
  CHECK(lookup("/proc/self/exe", map->l_addr, address, 64, other) == "<none>");
  // libc's, another module: another ID; no module start, none.
  Dl_info libc_info{};
  link_map *libc_map = nullptr;
  REQUIRE(dladdr1(reinterpret_cast<void *>(&write), &libc_info,
                  reinterpret_cast<void **>(&libc_map), RTLD_DL_LINKMAP));
  const BuildId libc_id = loaded_build_id(libc_info.dli_fbase, libc_map->l_addr);
  CHECK((libc_id.size == 0 || libc_id.size != loaded.size ||
         memcmp(libc_id.bytes, loaded.bytes, loaded.size) != 0));
  CHECK(loaded_build_id(nullptr, 0).size == 0);
}

TEST_CASE("a module image whose headers are odd gives no build ID, and is not read past") {
  // A page that holds an ELF header whose program headers would lie beyond the page, or whose
  // note segment lies outside every loaded segment.
  alignas(4096) static unsigned char page[4096];
  ElfW(Ehdr) header{};
  memcpy(header.e_ident, ELFMAG, SELFMAG);
  header.e_ident[EI_CLASS] = sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32;
  header.e_phentsize = sizeof(ElfW(Phdr));
  header.e_phoff = 4000;
  header.e_phnum = 10;  // 4000 + 10 entries: past the page
  memcpy(page, &header, sizeof header);
  CHECK(loaded_build_id(page, 0).size == 0);
  header.e_phoff = sizeof header;
  header.e_phnum = 1;
  memcpy(page, &header, sizeof header);
  ElfW(Phdr) note{};
  note.p_type = PT_NOTE;
  note.p_vaddr = 1 << 20;  // no PT_LOAD maps it: never read
  note.p_memsz = 64;
  memcpy(page + sizeof header, &note, sizeof note);
  CHECK(loaded_build_id(page, 0).size == 0);
  memcpy(page, "not an ELF header", 17);
  CHECK(loaded_build_id(page, 0).size == 0);
}
