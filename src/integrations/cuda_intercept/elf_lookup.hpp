#pragma once
// A symbol looked up in one loaded object's own dynamic symbol table, read through its program headers, and the
// loader's RTLD_NEXT rule computed over the loaded objects: what the interposer's dlsym(RTLD_NEXT, ...) answers
// (intercept.cpp), since glibc would take the interposer for the caller. Nothing here opens an object, allocates,
// or calls anything a tool might wrap (dlopen, malloc): it runs inside dlsym, which sanitizers and profilers call
// while they start. Every function is uninstrumented for the same reason.
#include <link.h>

#include <cstddef>

namespace plimsoll::elf_lookup {

/// `name`'s address as `object` itself defines it for an unversioned dlsym, or null: a defined symbol, global, weak
/// or unique, of type function, object, common, untyped or indirect function, in its default version (the versym
/// hidden bit clear). An indirect function's resolver is called as glibc calls it on x86-64 (no arguments); on other
/// architectures an indirect function is not resolved (null). Thread-local symbols are never answered (their address
/// is per thread). `object` must stay loaded and relocated during the call (dl_iterate_phdr's callback holds the
/// loader's lock).
void* find_symbol(const dl_phdr_info& object, const char* name);

/// dlsym(RTLD_NEXT, name) as glibc answers it for the code at `caller`, computed over the loaded objects, or null
/// (no object after the caller defines it, `caller` lies in no loaded object, or the answer cannot be given here).
/// The objects are walked with dl_iterate_phdr, which holds the loader's lock, so a concurrent dlclose waits. The
/// rule (docs/sharing.md):
///  - a caller loaded at start (the program, the preloads and their DT_NEEDED dependencies, told apart by structure
///    from objects dlopen'ed later, by a constructor too): the objects after it, in load order;
///  - a caller that dlopen brought in: its load root (the object dlopen was asked for) and the root's dependencies,
///    breadth first by DT_NEEDED, starting after the caller.
/// The vDSO is never searched. An object loaded after start is searched only once ld.so has relocated it
/// (_dl_find_object knows it, glibc 2.35 on); without _dl_find_object it is searched but its resolvers are not called.
/// An indirect function that is not resolved (that case, or any on a non-x86 architecture) ends the walk with null:
/// no later object answers in its place. A call made on the same thread while a walk runs (a signal handler, a
/// resolver asking) answers null. Only the main link namespace (dlmopen's others are not walked).
void* next_definition(const void* caller, const char* name);

}  // namespace plimsoll::elf_lookup
