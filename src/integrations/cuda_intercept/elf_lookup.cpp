#include "elf_lookup.hpp"

#include <dlfcn.h>
#include <elf.h>

#include <atomic>
#include <cstdint>

// Everything below runs inside dlsym, possibly while a sanitizer's runtime is still starting (it resolves its
// interceptors with dlsym(RTLD_NEXT, ...)): uninstrumented, and no call that such a runtime wraps (strcmp, dlopen,
// dladdr, malloc, the executable's own dl_iterate_phdr interceptor).
#define PLIMSOLL_ELF_UNINSTRUMENTED __attribute__((no_sanitize("address", "undefined", "thread")))

namespace plimsoll::elf_lookup {

namespace {

using Word = ElfW(Word);
using Address = ElfW(Addr);

PLIMSOLL_ELF_UNINSTRUMENTED bool same(const char* a, const char* b) {
  for (; *a != '\0' && *a == *b; ++a, ++b) {
  }
  return *a == *b;
}

// The dynamic section's parts that a lookup needs. ld.so relocates the d_ptr entries in place when the section is
// writable (most objects) and leaves them as offsets when it is not (the vDSO): an entry below the load address is
// an offset.
struct Dynamic {
  const ElfW(Sym)* symbols = nullptr;
  const char* strings = nullptr;
  const Word* sysv_hash = nullptr;
  const Word* gnu_hash = nullptr;
  const ElfW(Half)* versions = nullptr;
  const ElfW(Dyn)* entries = nullptr;
  const char* soname = nullptr;
};

PLIMSOLL_ELF_UNINSTRUMENTED Address relocated(Address base, Address pointer) {
  return pointer < base ? base + pointer : pointer;
}

PLIMSOLL_ELF_UNINSTRUMENTED Dynamic dynamic_of(const dl_phdr_info& object) {
  Dynamic d;
  for (ElfW(Half) i = 0; i < object.dlpi_phnum; ++i) {
    if (object.dlpi_phdr[i].p_type == PT_DYNAMIC) {
      d.entries = reinterpret_cast<const ElfW(Dyn)*>(object.dlpi_addr + object.dlpi_phdr[i].p_vaddr);
    }
  }
  if (d.entries == nullptr) return d;
  const Address base = object.dlpi_addr;
  Address soname = 0;
  bool has_soname = false;
  for (const ElfW(Dyn)* e = d.entries; e->d_tag != DT_NULL; ++e) {
    switch (e->d_tag) {
      case DT_SYMTAB: d.symbols = reinterpret_cast<const ElfW(Sym)*>(relocated(base, e->d_un.d_ptr)); break;
      case DT_STRTAB: d.strings = reinterpret_cast<const char*>(relocated(base, e->d_un.d_ptr)); break;
      case DT_HASH: d.sysv_hash = reinterpret_cast<const Word*>(relocated(base, e->d_un.d_ptr)); break;
      case DT_GNU_HASH: d.gnu_hash = reinterpret_cast<const Word*>(relocated(base, e->d_un.d_ptr)); break;
      case DT_VERSYM: d.versions = reinterpret_cast<const ElfW(Half)*>(relocated(base, e->d_un.d_ptr)); break;
      case DT_SONAME: soname = e->d_un.d_val; has_soname = true; break;
      default: break;
    }
  }
  if (d.strings != nullptr && has_soname) d.soname = d.strings + soname;
  if (d.symbols == nullptr || d.strings == nullptr) d.sysv_hash = d.gnu_hash = nullptr;
  return d;
}

PLIMSOLL_ELF_UNINSTRUMENTED void* resolve_indirect(Address resolver) {
#if defined(__x86_64__) || defined(__i386__)
  // As glibc calls an IFUNC resolver on x86 (elf_ifunc_invoke): no arguments.
  return reinterpret_cast<void* (*)()>(resolver)();
#else
  (void)resolver;
  return nullptr;  // other architectures pass hwcap arguments; not resolved here (documented in the header)
#endif
}

// Symbol `index` if it is `name`'s definition that an unversioned dlsym accepts (glibc's check_match with
// DL_LOOKUP_RETURN_NEWEST): defined, a kind with an address, exported, and not a hidden (non-default) version.
PLIMSOLL_ELF_UNINSTRUMENTED bool accepts(const Dynamic& d, Word index, const char* name) {
  const ElfW(Sym)& symbol = d.symbols[index];
  if (symbol.st_shndx == SHN_UNDEF || (symbol.st_value == 0 && ELF64_ST_TYPE(symbol.st_info) != STT_TLS)) return false;
  switch (ELF64_ST_TYPE(symbol.st_info)) {
    case STT_NOTYPE: case STT_OBJECT: case STT_FUNC: case STT_COMMON: case STT_GNU_IFUNC: break;
    default: return false;  // STT_TLS among them: its address is per thread
  }
  switch (ELF64_ST_BIND(symbol.st_info)) {
    case STB_GLOBAL: case STB_WEAK: case STB_GNU_UNIQUE: break;
    default: return false;
  }
  if (d.versions != nullptr && (d.versions[index] & 0x8000) != 0 && (d.versions[index] & 0x7fff) >= 2) return false;
  return same(d.strings + symbol.st_name, name);
}

PLIMSOLL_ELF_UNINSTRUMENTED std::uint32_t gnu_hash(const char* name) {
  std::uint32_t h = 5381;
  for (const auto* c = reinterpret_cast<const unsigned char*>(name); *c != '\0'; ++c) h = h * 33 + *c;
  return h;
}

PLIMSOLL_ELF_UNINSTRUMENTED std::uint32_t sysv_hash(const char* name) {
  std::uint32_t h = 0;
  for (const auto* c = reinterpret_cast<const unsigned char*>(name); *c != '\0'; ++c) {
    h = (h << 4) + *c;
    const std::uint32_t high = h & 0xf0000000u;
    if (high != 0) h ^= high >> 24;
    h &= ~high;
  }
  return h;
}

// The index of `name`'s accepted definition, or 0 (index 0 is the null symbol).
PLIMSOLL_ELF_UNINSTRUMENTED Word index_of(const Dynamic& d, const char* name) {
  if (d.gnu_hash != nullptr) {
    const Word buckets = d.gnu_hash[0], first = d.gnu_hash[1], bloom_words = d.gnu_hash[2], shift = d.gnu_hash[3];
    if (buckets == 0 || bloom_words == 0) return 0;
    const auto* bloom = reinterpret_cast<const Address*>(d.gnu_hash + 4);
    const Word* bucket = reinterpret_cast<const Word*>(bloom + bloom_words);
    const Word* chain = bucket + buckets;
    const std::uint32_t h = gnu_hash(name);
    constexpr unsigned kBits = sizeof(Address) * 8;
    const Address word = bloom[(h / kBits) % bloom_words];
    const Address mask = (Address{1} << (h % kBits)) | (Address{1} << ((h >> shift) % kBits));
    if ((word & mask) != mask) return 0;
    Word index = bucket[h % buckets];
    if (index < first) return 0;
    for (;; ++index) {
      const Word entry = chain[index - first];
      if ((entry | 1u) == (h | 1u) && accepts(d, index, name)) return index;
      if ((entry & 1u) != 0) return 0;
    }
  }
  if (d.sysv_hash != nullptr) {
    const Word buckets = d.sysv_hash[0];
    if (buckets == 0) return 0;
    const Word* bucket = d.sysv_hash + 2;
    const Word* chain = bucket + buckets;
    for (Word index = bucket[sysv_hash(name) % buckets]; index != 0; index = chain[index]) {
      if (accepts(d, index, name)) return index;
    }
  }
  return 0;
}

PLIMSOLL_ELF_UNINSTRUMENTED void* definition(const dl_phdr_info& object, const Dynamic& d, const char* name) {
  const Word index = index_of(d, name);
  if (index == 0) return nullptr;
  const ElfW(Sym)& symbol = d.symbols[index];
  const Address address = object.dlpi_addr + symbol.st_value;
  if (ELF64_ST_TYPE(symbol.st_info) == STT_GNU_IFUNC) return resolve_indirect(address);
  return reinterpret_cast<void*>(address);
}

// The loaded objects, copied while dl_iterate_phdr holds the loader's lock; only used while it still holds it (the
// walk below runs inside the outer call's callback), so the one buffer is shared by every thread: the lock
// serialises them. Past kMaxObjects objects the rest are not searched.
constexpr int kMaxObjects = 4096;
struct Loaded {
  dl_phdr_info objects[kMaxObjects];
  int count;
};
Loaded loaded;

// Objects loaded before the interposer's constructor ran: the ones loaded at start (-1 until then: every object
// counts as loaded at start).
std::atomic<int> start_objects{-1};

using IteratePhdr = int (*)(int (*)(dl_phdr_info*, std::size_t, void*), void*);

// libc's dl_iterate_phdr: a sanitized executable exports an interceptor of that name which cannot run before the
// sanitizer has started, and the sanitizer's start is where dlsym(RTLD_NEXT, ...) is asked first.
PLIMSOLL_ELF_UNINSTRUMENTED IteratePhdr find_iterate_phdr() {
  void* found = dlvsym(RTLD_NEXT, "dl_iterate_phdr", "GLIBC_2.2.5");
  if (found == nullptr) found = dlvsym(RTLD_NEXT, "dl_iterate_phdr", "GLIBC_2.17");
  if (found == nullptr) found = dlvsym(RTLD_NEXT, "dl_iterate_phdr", "GLIBC_2.2.4");
  return found != nullptr ? reinterpret_cast<IteratePhdr>(found) : &::dl_iterate_phdr;
}

PLIMSOLL_ELF_UNINSTRUMENTED IteratePhdr iterate_phdr() {
  static const IteratePhdr found = find_iterate_phdr();
  return found;
}

PLIMSOLL_ELF_UNINSTRUMENTED int copy_one(dl_phdr_info* info, std::size_t, void*) {
  if (loaded.count < kMaxObjects) loaded.objects[loaded.count++] = *info;
  return 0;
}

PLIMSOLL_ELF_UNINSTRUMENTED bool contains(const dl_phdr_info& object, Address address) {
  for (ElfW(Half) i = 0; i < object.dlpi_phnum; ++i) {
    const ElfW(Phdr)& segment = object.dlpi_phdr[i];
    const Address start = object.dlpi_addr + segment.p_vaddr;
    if (segment.p_type == PT_LOAD && address >= start && address - start < segment.p_memsz) return true;
  }
  return false;
}

PLIMSOLL_ELF_UNINSTRUMENTED const char* base_name(const char* path) {
  const char* base = path;
  for (const char* c = path; *c != '\0'; ++c) {
    if (*c == '/') base = c + 1;
  }
  return base;
}

// Whether `object` is what the DT_NEEDED entry `needed` names: by its soname, else by its file's name.
PLIMSOLL_ELF_UNINSTRUMENTED bool answers(const dl_phdr_info& object, const char* needed) {
  const Dynamic d = dynamic_of(object);
  if (d.soname != nullptr && same(d.soname, needed)) return true;
  return object.dlpi_name != nullptr && (same(object.dlpi_name, needed) || same(base_name(object.dlpi_name), needed));
}

PLIMSOLL_ELF_UNINSTRUMENTED bool needs(const dl_phdr_info& object, const dl_phdr_info& dependency) {
  const Dynamic d = dynamic_of(object);
  if (d.entries == nullptr || d.strings == nullptr) return false;
  for (const ElfW(Dyn)* e = d.entries; e->d_tag != DT_NULL; ++e) {
    if (e->d_tag == DT_NEEDED && answers(dependency, d.strings + e->d_un.d_val)) return true;
  }
  return false;
}

// The first loaded object that the DT_NEEDED entry `needed` names, or -1.
PLIMSOLL_ELF_UNINSTRUMENTED int named(const char* needed) {
  for (int i = 0; i < loaded.count; ++i) {
    if (answers(loaded.objects[i], needed)) return i;
  }
  return -1;
}

// The object that dlopen was asked for and that brought `caller` in (the caller itself, or the dlopen'ed object
// before it whose dependency it is): dlopen maps an object and its new dependencies together, after it.
PLIMSOLL_ELF_UNINSTRUMENTED int load_root(int first_opened, int caller) {
  int root = first_opened;
  for (int i = first_opened + 1; i <= caller; ++i) {
    bool dependency = false;
    for (int j = root; j < i && !dependency; ++j) dependency = needs(loaded.objects[j], loaded.objects[i]);
    if (!dependency) root = i;
  }
  return root;
}

// `root`'s scope as glibc builds a dlopen'ed object's (l_searchlist): the root, then its dependencies breadth first.
constexpr int kMaxScope = 512;
struct Scope {
  int members[kMaxScope];
  int count;
};
Scope scope;

PLIMSOLL_ELF_UNINSTRUMENTED void build_scope(int root) {
  scope.count = 0;
  scope.members[scope.count++] = root;
  for (int next = 0; next < scope.count; ++next) {
    const Dynamic d = dynamic_of(loaded.objects[scope.members[next]]);
    if (d.entries == nullptr || d.strings == nullptr) continue;
    for (const ElfW(Dyn)* e = d.entries; e->d_tag != DT_NULL; ++e) {
      if (e->d_tag != DT_NEEDED) continue;
      const int dependency = named(d.strings + e->d_un.d_val);
      bool seen = dependency < 0;
      for (int k = 0; k < scope.count && !seen; ++k) seen = scope.members[k] == dependency;
      if (!seen && scope.count < kMaxScope) scope.members[scope.count++] = dependency;
    }
  }
}

struct Question {
  Address caller;
  const char* name;
  void* answer;
};

// Called for the first object only: the whole walk runs here, under the lock the outer dl_iterate_phdr holds (it
// is recursive, so the inner call that copies the list takes it again).
PLIMSOLL_ELF_UNINSTRUMENTED int answer_under_lock(dl_phdr_info*, std::size_t, void* data) {
  auto& question = *static_cast<Question*>(data);
  loaded.count = 0;
  iterate_phdr()(copy_one, nullptr);
  int caller = -1;
  for (int i = 0; i < loaded.count && caller < 0; ++i) {
    if (contains(loaded.objects[i], question.caller)) caller = i;
  }
  if (caller < 0) return 1;
  const int at_start = start_objects.load(std::memory_order_acquire);
  if (at_start >= 0 && caller >= at_start) {
    build_scope(load_root(at_start, caller));
    int position = -1;
    for (int k = 0; k < scope.count && position < 0; ++k) {
      if (scope.members[k] == caller) position = k;
    }
    if (position >= 0) {
      for (int k = position + 1; k < scope.count; ++k) {
        const dl_phdr_info& object = loaded.objects[scope.members[k]];
        if (void* found = definition(object, dynamic_of(object), question.name)) {
          question.answer = found;
          return 1;
        }
      }
      return 1;
    }
  }
  for (int i = caller + 1; i < loaded.count; ++i) {
    if (void* found = definition(loaded.objects[i], dynamic_of(loaded.objects[i]), question.name)) {
      question.answer = found;
      return 1;
    }
  }
  return 1;
}

PLIMSOLL_ELF_UNINSTRUMENTED int count_one(dl_phdr_info*, std::size_t, void* data) {
  ++*static_cast<int*>(data);
  return 0;
}

// Runs after every object loaded at start is mapped (before main); one dlopen'ed by an earlier constructor is taken
// for loaded at start.
__attribute__((constructor)) PLIMSOLL_ELF_UNINSTRUMENTED void count_start_objects() {
  int count = 0;
  iterate_phdr()(count_one, &count);
  start_objects.store(count, std::memory_order_release);
}

}  // namespace

PLIMSOLL_ELF_UNINSTRUMENTED void* find_symbol(const dl_phdr_info& object, const char* name) {
  return definition(object, dynamic_of(object), name);
}

PLIMSOLL_ELF_UNINSTRUMENTED void* next_definition(const void* caller, const char* name) {
  Question question{reinterpret_cast<Address>(caller), name, nullptr};
  iterate_phdr()(answer_under_lock, &question);
  return question.answer;
}

}  // namespace plimsoll::elf_lookup
