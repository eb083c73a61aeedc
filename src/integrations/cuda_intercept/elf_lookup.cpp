#include "elf_lookup.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <sys/auxv.h>

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

// What one object answers for a name: nothing (search on), a definition, or a definition this lookup cannot give
// (an indirect function whose resolver must not or cannot be called here), which ends the search with null: the
// objects after it must not answer in its place.
struct Answer {
  enum Kind { kAbsent, kFound, kUnanswerable } kind = kAbsent;
  void* address = nullptr;
};

#if defined(__x86_64__) || defined(__i386__)
constexpr bool kResolvesIndirect = true;
#else
constexpr bool kResolvesIndirect = false;  // other architectures pass hwcap arguments (documented in the header)
#endif

PLIMSOLL_ELF_UNINSTRUMENTED void* resolve_indirect(Address resolver) {
#if defined(__x86_64__) || defined(__i386__)
  // As glibc calls an IFUNC resolver on x86 (elf_ifunc_invoke): no arguments.
  return reinterpret_cast<void* (*)()>(resolver)();
#else
  (void)resolver;
  return nullptr;
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

// `may_resolve`: whether an indirect function's resolver may be called, i.e. the object is known to be relocated (a
// resolver reads its own object's GOT).
PLIMSOLL_ELF_UNINSTRUMENTED Answer definition(const dl_phdr_info& object, const Dynamic& d, const char* name,
                                              bool may_resolve) {
  const Word index = index_of(d, name);
  if (index == 0) return {};
  const ElfW(Sym)& symbol = d.symbols[index];
  const Address address = object.dlpi_addr + symbol.st_value;
  if (ELF64_ST_TYPE(symbol.st_info) == STT_GNU_IFUNC) {
    if (!kResolvesIndirect || !may_resolve) return {Answer::kUnanswerable, nullptr};
    return {Answer::kFound, resolve_indirect(address)};
  }
  return {Answer::kFound, reinterpret_cast<void*>(address)};
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

// Set while a walk uses the buffers above. Only the thread holding the loader's lock reads or writes it, so when a
// walk finds it set, the same thread has come back in (a signal handler, a resolver asking dlsym) and must not
// overwrite what the outer walk is still reading.
bool walking = false;

// The vDSO's ELF header (getauxval(AT_SYSINFO_EHDR)), read under the lock for the current walk: dl_iterate_phdr
// lists the vDSO, but glibc never searches it for a symbol.
Address vdso = 0;

// How many objects, first in load order, glibc loaded at start (the program, the preloads and their dependencies);
// -1 until the first walk counts them. They are never unloaded and all come before any dlopen'ed object, so the
// count taken once holds for the process's life.
std::atomic<int> start_objects{-1};

// glibc's _dl_find_object (2.35 and later), or null: it knows an object only once ld.so has relocated it, while
// dl_iterate_phdr already lists objects another thread's dlopen has only mapped.
using FindObject = int (*)(void*, void*);
// Room for struct dl_find_object (12 words in glibc 2.35) and whatever later versions add to it.
struct alignas(16) FoundObject {
  unsigned char bytes[512];
};

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

// Looked up outside the loader's lock (dlvsym takes ld.so's other lock, which a dlopen holds while it waits for
// the one dl_iterate_phdr holds).
PLIMSOLL_ELF_UNINSTRUMENTED FindObject find_object() {
  static const FindObject found = reinterpret_cast<FindObject>(dlvsym(RTLD_DEFAULT, "_dl_find_object", "GLIBC_2.35"));
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

PLIMSOLL_ELF_UNINSTRUMENTED bool is_vdso(const dl_phdr_info& object) { return vdso != 0 && contains(object, vdso); }

// Whether ld.so has finished relocating `object` (_dl_find_object knows it); without _dl_find_object, unknown.
PLIMSOLL_ELF_UNINSTRUMENTED bool published(const dl_phdr_info& object, FindObject find) {
  for (ElfW(Half) i = 0; i < object.dlpi_phnum; ++i) {
    if (object.dlpi_phdr[i].p_type == PT_LOAD) {
      FoundObject found;
      return find(reinterpret_cast<void*>(object.dlpi_addr + object.dlpi_phdr[i].p_vaddr), &found) == 0;
    }
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

// Whether an object with this soname and file name is what the DT_NEEDED entry `needed` names.
PLIMSOLL_ELF_UNINSTRUMENTED bool answers(const char* soname, const char* file, const char* needed) {
  if (soname != nullptr && same(soname, needed)) return true;
  return file != nullptr && (same(file, needed) || same(base_name(file), needed));
}

PLIMSOLL_ELF_UNINSTRUMENTED bool answers(const dl_phdr_info& object, const char* needed) {
  return answers(dynamic_of(object).soname, object.dlpi_name, needed);
}

PLIMSOLL_ELF_UNINSTRUMENTED bool needs(const dl_phdr_info& object, const dl_phdr_info& dependency) {
  const Dynamic d = dynamic_of(object);
  if (d.entries == nullptr || d.strings == nullptr) return false;
  const char* const soname = dynamic_of(dependency).soname;
  for (const ElfW(Dyn)* e = d.entries; e->d_tag != DT_NULL; ++e) {
    if (e->d_tag == DT_NEEDED && answers(soname, dependency.dlpi_name, d.strings + e->d_un.d_val)) return true;
  }
  return false;
}

// glibc's start objects by structure: the program (first), then the vDSO and the preloads (ahead of the program's
// first dependency that was not preloaded), then every object of the breadth-first DT_NEEDED walk, each needed by an
// object before it. The first object after them that no earlier object needs was dlopen'ed, possibly by a
// constructor before the interposer's own ran. A program that needs nothing loaded counts every object as a start
// one (the load-order rule for all).
PLIMSOLL_ELF_UNINSTRUMENTED int count_start_objects() {
  int count = 1;
  while (count < loaded.count && !needs(loaded.objects[0], loaded.objects[count])) ++count;
  if (count >= loaded.count) return loaded.count;
  for (++count; count < loaded.count; ++count) {
    if (is_vdso(loaded.objects[count])) continue;  // wherever it is listed, it was there at start
    bool needed = false;
    for (int j = 0; j < count && !needed; ++j) needed = needs(loaded.objects[j], loaded.objects[count]);
    if (!needed) break;
  }
  return count;
}

// The first loaded object that the DT_NEEDED entry `needed` names, or -1 (never the vDSO).
PLIMSOLL_ELF_UNINSTRUMENTED int named(const char* needed) {
  for (int i = 0; i < loaded.count; ++i) {
    if (!is_vdso(loaded.objects[i]) && answers(loaded.objects[i], needed)) return i;
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
  FindObject find_object;
  void* answer;
};

// Object `i`'s answer to the question. An object loaded after start is searched only once relocated (glibc >= 2.35
// tells); without _dl_find_object it is searched, but its resolvers are not called (the walk ends with null there).
PLIMSOLL_ELF_UNINSTRUMENTED Answer ask(int i, int at_start, const Question& question) {
  const dl_phdr_info& object = loaded.objects[i];
  if (is_vdso(object)) return {};
  const bool loaded_later = i >= at_start;
  if (loaded_later && question.find_object != nullptr && !published(object, question.find_object)) return {};
  const bool may_resolve = !loaded_later || question.find_object != nullptr;
  return definition(object, dynamic_of(object), question.name, may_resolve);
}

// Whether the walk ends at this answer (found, or unanswerable: null); stores what it found.
PLIMSOLL_ELF_UNINSTRUMENTED bool settles(const Answer& answer, Question& question) {
  if (answer.kind == Answer::kAbsent) return false;
  question.answer = answer.address;
  return true;
}

PLIMSOLL_ELF_UNINSTRUMENTED void walk(Question& question) {
  loaded.count = 0;
  iterate_phdr()(copy_one, nullptr);
  vdso = static_cast<Address>(getauxval(AT_SYSINFO_EHDR));
  int caller = -1;
  for (int i = 0; i < loaded.count && caller < 0; ++i) {
    if (contains(loaded.objects[i], question.caller)) caller = i;
  }
  if (caller < 0) return;
  int at_start = start_objects.load(std::memory_order_relaxed);
  if (at_start < 0) {
    at_start = count_start_objects();
    start_objects.store(at_start, std::memory_order_relaxed);
  }
  if (caller >= at_start) {
    build_scope(load_root(at_start, caller));
    int position = -1;
    for (int k = 0; k < scope.count && position < 0; ++k) {
      if (scope.members[k] == caller) position = k;
    }
    if (position >= 0) {
      for (int k = position + 1; k < scope.count; ++k) {
        if (settles(ask(scope.members[k], at_start, question), question)) return;
      }
      return;
    }
  }
  for (int i = caller + 1; i < loaded.count; ++i) {
    if (settles(ask(i, at_start, question), question)) return;
  }
}

// Called for the first object only: the whole walk runs here, under the lock the outer dl_iterate_phdr holds (it
// is recursive, so the inner call that copies the list takes it again). A call that comes back in on the same thread
// answers null rather than overwrite the buffers the outer walk reads.
PLIMSOLL_ELF_UNINSTRUMENTED int answer_under_lock(dl_phdr_info*, std::size_t, void* data) {
  if (walking) return 1;
  walking = true;
  walk(*static_cast<Question*>(data));
  walking = false;
  return 1;
}

}  // namespace

PLIMSOLL_ELF_UNINSTRUMENTED void* find_symbol(const dl_phdr_info& object, const char* name) {
  const Answer answer = definition(object, dynamic_of(object), name, true);
  return answer.kind == Answer::kFound ? answer.address : nullptr;
}

PLIMSOLL_ELF_UNINSTRUMENTED void* next_definition(const void* caller, const char* name) {
  Question question{reinterpret_cast<Address>(caller), name, find_object(), nullptr};
  iterate_phdr()(answer_under_lock, &question);
  return question.answer;
}

}  // namespace plimsoll::elf_lookup
