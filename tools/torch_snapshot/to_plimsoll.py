#!/usr/bin/env python3
"""Converts a PyTorch CUDA memory snapshot into plimsoll's binary trace format (version 1).

    python3 tools/torch_snapshot/to_plimsoll.py SNAPSHOT.pickle OUT.plimsoll [--device N]

SNAPSHOT.pickle is what torch.cuda.memory._dump_snapshot() writes after
torch.cuda.memory._record_memory_history(): a pickled dict whose "device_traces" hold, per CUDA device, the
allocator's actions in order (its "segments", the allocator's state at the end, add the blocks allocated before
the trace began and never freed). OUT.plimsoll is read by every plimsoll command that takes a trace
(plimsoll::read_trace). docs/trace-readers.md says how each action maps; docs/trace-format.md specifies the output.

A pickle can name any Python callable and have the loader call it, so the snapshot is loaded by an Unpickler that
refuses every global: a snapshot holds only dicts, lists, tuples, strings, numbers, booleans and None.

Standard library only, so it runs where PyTorch is not installed. Exit status: 0 converted, 2 bad input (the
message names the file, the device and entry, and the fix).
"""

from __future__ import annotations

import argparse
import functools
import heapq
import os
import pickle
import struct
import sys
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, BinaryIO, Iterator, NoReturn

EXIT_BAD_INPUT = 2
U64_LIMIT = 1 << 64

# --- the output format (docs/trace-format.md; C++ transcription: src/telemetry/traces/trace_binary.hpp) ---

MAGIC = b"PLIMSOLL"
FORMAT_VERSION = 1
HEADER = struct.Struct("<8sIIQQ")  # magic, version, event record size, start (ns since the epoch), reserved
# kind, flags, device, tag, reserved, thread, site, time, id, bytes, stream
EVENT_RECORD = struct.Struct("<BBHHHIIQQQQ")
STRING_RECORD = struct.Struct("<BBHIII")  # kind, table, reserved, id, length, reserved
MAX_STRING_BYTES = 65536

KIND_ALLOCATE, KIND_FREE, KIND_MAP, KIND_UNMAP, KIND_OOM, KIND_MARKER, KIND_STRING, KIND_END = range(1, 9)
TABLE_SITE, TABLE_MARKER, TABLE_DEVICE = 2, 3, 4
KIND_NAMES = {KIND_ALLOCATE: "allocate", KIND_FREE: "free", KIND_MAP: "map", KIND_UNMAP: "unmap",
              KIND_OOM: "oom", KIND_MARKER: "marker"}

# --- the input format: torch.cuda.memory._snapshot() (see the _snapshot docstring in torch/cuda/memory.py) ---

FREE_ACTIONS = ("free_completed", "free_requested")
ACTION_KINDS = {
    "alloc": KIND_ALLOCATE,
    "segment_alloc": KIND_MAP,
    "segment_map": KIND_MAP,  # expandable segments grow by mapping pages into a reserved range
    "segment_free": KIND_UNMAP,
    "segment_unmap": KIND_UNMAP,
    "oom": KIND_OOM,
    "snapshot": KIND_MARKER,
}
# Recorded by recent PyTorch, with no effect on what is allocated: metadata attached to a live allocation.
IGNORED_ACTIONS = ("annotate",)
KNOWN_ACTIONS = (*ACTION_KINDS, *FREE_ACTIONS, *IGNORED_ACTIONS)
SNAPSHOT_MARKER = "torch memory snapshot"


class SnapshotError(Exception):
    """Input that cannot be converted; the message names the file, the place, what is wrong and the fix."""


class GlobalRefused(pickle.UnpicklingError):
    """The pickle named a class or function: not a snapshot, and loading it could run code."""


class RestrictedUnpickler(pickle.Unpickler):
    """Builds only plain data. Every opcode that would import something (GLOBAL, STACK_GLOBAL, INST, OBJ, the
    copyreg extension codes) goes through find_class, so refusing there refuses all code a pickle could run;
    REDUCE and BUILD can then only be applied to what find_class returned."""

    def find_class(self, module: str, name: str) -> NoReturn:
        raise GlobalRefused(
            f"the pickle names the global {module}.{name}; a PyTorch memory snapshot holds only dicts, lists, "
            f"tuples, strings, numbers, booleans and None, and unpickling a global can run code, so it is refused: "
            f"pass the file torch.cuda.memory._dump_snapshot() wrote")


def load_snapshot(path: str) -> Any:
    """Unpickles `path` with RestrictedUnpickler."""
    try:
        with open(path, "rb") as file:
            return RestrictedUnpickler(file).load()
    except OSError as error:
        raise SnapshotError(f"{path}: cannot read the snapshot: {error.strerror}; check the path") from None
    except GlobalRefused as error:
        raise SnapshotError(f"{path}: {error}") from None
    except Exception as error:  # every way a damaged or foreign file fails inside pickle  # noqa: BLE001
        raise SnapshotError(f"{path}: not a pickle ({type(error).__name__}: {error}); pass the file "
                            f"torch.cuda.memory._dump_snapshot() wrote") from None


# --- validating the snapshot ---

@dataclass(frozen=True)
class Place:
    """Where a value is, for messages: an entry of a device's trace, or (with `label`) a segment or block."""
    path: str
    device: int = -1
    index: int = -1
    label: str = ""

    def fail(self, what: str) -> NoReturn:
        where = self.label or f"device {self.device}, entry {self.index}"
        raise SnapshotError(f"{self.path}: {where}: {what}")


def shown(value: Any) -> str:
    """A value for a message: its repr, cut short, as damaged input can hold huge structures."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def required_int(entry: dict[str, Any], key: str, place: Place, action: str) -> int:
    if key not in entry:
        place.fail(f"'{key}' is missing from the '{action}' entry; PyTorch writes it for every '{action}': the "
                   f"snapshot is damaged or not from torch.cuda.memory._dump_snapshot()")
    value = entry[key]
    if not is_int(value):
        place.fail(f"'{key}' is {type(value).__name__} {shown(value)}, not an integer; the snapshot is damaged")
    return value


def unsigned(value: int, key: str, place: Place) -> int:
    if not 0 <= value < U64_LIMIT:
        place.fail(f"'{key}' is {value}, outside 0 .. 2^64-1; the snapshot is damaged")
    return value


def stream_handle(value: int, place: Place) -> int:
    """PyTorch stores the cudaStream_t as a signed 64-bit integer; the trace format holds it unsigned."""
    if not -(1 << 63) <= value < U64_LIMIT:
        place.fail(f"'stream' is {value}, not a 64-bit stream handle; the snapshot is damaged")
    return value % U64_LIMIT


# Path components and function-name prefixes of the code between the user's line and the allocator.
TORCH_COMPONENTS = frozenset({"torch", "c10", "aten", "caffe2"})
TORCH_LIBRARY_PREFIXES = ("libtorch", "libc10")
INTERPRETER_COMPONENTS = frozenset({"Python", "Objects", "Modules", "Include", "Parser"})
INTERPRETER_FUNCTION_PREFIXES = ("Py", "_Py")
UNKNOWN_FILES = ("", "??")


@functools.lru_cache(maxsize=65536)  # a run has few distinct frames, each seen in many stacks
def is_torch_or_runtime_frame(filename: str, name: str) -> bool:
    """True for frames that are not the user's: PyTorch's Python code (.../site-packages/torch/...), its C++
    (sources under torch/, c10/, aten/; or, unsymbolized, libtorch*.so / libc10*.so), the CPython interpreter that
    runs the Python frames, and frames with no source file."""
    if filename in UNKNOWN_FILES:
        return True
    path = PurePath(filename)
    if TORCH_COMPONENTS.intersection(path.parts[:-1]) or path.name.startswith(TORCH_LIBRARY_PREFIXES):
        return True
    if name.startswith(INTERPRETER_FUNCTION_PREFIXES):
        return True
    return path.suffix in (".c", ".h") and bool(INTERPRETER_COMPONENTS.intersection(path.parts[:-1]))


def call_site(frames: list[Any], place: Place) -> str:
    """'function (file:line)' of the first frame, innermost first, outside torch; "" when every frame is torch's."""
    for number, frame in enumerate(frames):
        if not isinstance(frame, dict):
            place.fail(f"frame {number} is {type(frame).__name__}, not a dict with 'filename', 'line' and 'name'; "
                       f"the snapshot is damaged")
        filename, line, name = frame.get("filename"), frame.get("line"), frame.get("name")
        if not isinstance(filename, str) or not is_int(line) or not isinstance(name, str):
            place.fail(f"frame {number} is {shown(frame)}; a frame holds 'filename' (str), 'line' (int) and 'name' "
                       f"(str): the snapshot is damaged")
        if not is_torch_or_runtime_frame(filename, name):
            return f"{name} ({filename}:{line})"
    return ""


@dataclass(frozen=True)
class Entry:
    """One trace entry, checked."""
    device: int
    index: int
    action: str
    addr: int
    size: int
    stream: int
    time_us: int | None
    site: str


@dataclass
class SiteCache:
    """PyTorch shares one frames list among the entries of one stack (the pickle keeps the sharing), so each
    distinct list is searched once."""
    sites: dict[int, tuple[list[Any], str]] = field(default_factory=dict)

    def site_of(self, frames: list[Any], place: Place) -> str:
        known = self.sites.get(id(frames))
        if known is not None and known[0] is frames:
            return known[1]
        site = call_site(frames, place)
        self.sites[id(frames)] = (frames, site)
        return site


def check_entry(raw: Any, place: Place, sites: SiteCache) -> Entry:
    if not isinstance(raw, dict):
        place.fail(f"the entry is {type(raw).__name__}, not a dict with an 'action'; the snapshot is damaged")
    action = raw.get("action")
    if not isinstance(action, str):
        place.fail(f"'action' is {'missing' if action is None else shown(action)}; every trace entry names its "
                   f"action: the snapshot is damaged")
    if action not in KNOWN_ACTIONS:
        place.fail(f"unknown action {shown(action)}; this converter knows {', '.join(KNOWN_ACTIONS)}: the snapshot is "
                   f"from a newer PyTorch, so extend tools/torch_snapshot/to_plimsoll.py")
    addr = size = stream = 0
    if action not in ("snapshot", *IGNORED_ACTIONS):
        size = unsigned(required_int(raw, "size", place, action), "size", place)
        stream = stream_handle(required_int(raw, "stream", place, action), place)
        if action != "oom":  # an oom entry has 'device_free' where the others have 'addr'
            addr = unsigned(required_int(raw, "addr", place, action), "addr", place)
            if addr == 0 and action == "alloc":
                place.fail("'alloc' at address 0; allocations have a nonzero address: the snapshot is damaged")
    time_us = raw.get("time_us")
    if time_us is not None:
        if not is_int(time_us):
            place.fail(f"'time_us' is {type(time_us).__name__} {shown(time_us)}, not an integer; the snapshot is "
                       f"damaged")
        time_us = unsigned(time_us, "time_us", place)
    frames = raw.get("frames", [])
    if not isinstance(frames, list):
        place.fail(f"'frames' is {type(frames).__name__}, not a list of frames; the snapshot is damaged")
    site = sites.site_of(frames, place) if action in ("alloc", "oom") else ""
    return Entry(place.device, place.index, action, addr, size, stream, time_us, site)


def device_traces(snapshot: Any, path: str) -> list[list[Any]]:
    if not isinstance(snapshot, dict):
        raise SnapshotError(f"{path}: the pickle holds a {type(snapshot).__name__}, not a snapshot dict; pass the "
                            f"file torch.cuda.memory._dump_snapshot() wrote")
    for key in ("segments", "device_traces"):
        if key not in snapshot:
            raise SnapshotError(f"{path}: the dict has no '{key}' key (it has {sorted(map(str, snapshot))[:8]}), so "
                                f"it is not a memory snapshot; pass the file torch.cuda.memory._dump_snapshot() wrote")
    traces = snapshot["device_traces"]
    if not isinstance(traces, list) or not all(isinstance(trace, list) for trace in traces):
        raise SnapshotError(f"{path}: 'device_traces' is not a list of lists (one per device); the snapshot is "
                            f"damaged")
    return traces


# --- from entries to plimsoll events ---

@dataclass(frozen=True)
class Event:
    time_us: int
    device: int
    kind: int
    id: int
    bytes: int
    stream: int
    site: str = ""


@dataclass
class DeviceEvents:
    """One device's events in trace order, and the blocks that were live before its first entry: those the trace
    frees, and those still live when the snapshot was taken."""
    device: int
    free_action: str
    events: list[Event] = field(default_factory=list)
    live_at_start: list[Event] = field(default_factory=list)
    live_throughout: list[Event] = field(default_factory=list)
    live_at_end: set[int] = field(default_factory=set)  # addresses
    entries: int = 0


def convert_device(entries: list[Entry], device: int, path: str) -> DeviceEvents:
    """Pairs allocations with frees. PyTorch records 'free_requested' when a tensor dies and 'free_completed' once
    no stream uses the block any more; the block is live until the latter, so frees come from 'free_completed',
    or from 'free_requested' when the trace has no completed frees (skip_actions, or a PyTorch without them)."""
    free_action = "free_completed" if any(e.action == "free_completed" for e in entries) else "free_requested"
    result = DeviceEvents(device, free_action, entries=len(entries))
    live: dict[int, int] = {}  # address -> index of the entry that allocated it
    freed: dict[int, int] = {}  # address -> index of the entry that freed it, until allocated again
    for entry in entries:
        place = Place(path, device, entry.index)
        if entry.action == "alloc":
            if entry.addr in live:
                place.fail(f"'alloc' at {entry.addr:#x}, which is still live (allocated by entry {live[entry.addr]} "
                           f"and not freed since); the trace misses a '{free_action}': the snapshot is damaged")
            live[entry.addr] = entry.index
            freed.pop(entry.addr, None)
        elif entry.action == free_action:
            if entry.addr in live:
                del live[entry.addr]
            elif entry.addr in freed:
                place.fail(f"'{free_action}' of {entry.addr:#x}, which entry {freed[entry.addr]} freed already; a "
                           f"block is freed once per 'alloc': the snapshot is damaged")
            else:
                # Allocated before the trace began (before _record_memory_history, or dropped by its max_entries
                # ring buffer): it was live from the start, with the size its free reports.
                result.live_at_start.append(Event(0, device, KIND_ALLOCATE, entry.addr, entry.size, entry.stream))
            freed[entry.addr] = entry.index
        kind = KIND_FREE if entry.action == free_action else ACTION_KINDS.get(entry.action)
        if kind is None:
            continue  # the other free action, or an ignored one
        result.events.append(Event(entry.time_us or 0, device, kind, entry.addr, entry.size, entry.stream,
                                   entry.site))
    result.live_at_end = set(live)
    return result


def segment_field(container: dict[str, Any], key: str, kind: type, place: Place) -> Any:
    value = container.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        found = "missing" if key not in container else f"{type(value).__name__} {shown(value)}"
        place.fail(f"'{key}' is {found}, not {kind.__name__}; the snapshot is damaged")
    return value


def add_blocks_live_throughout(snapshot: dict[str, Any], devices: list[DeviceEvents], path: str) -> None:
    """Blocks allocated when the snapshot was taken ('active_allocated' in 'segments') that the converted trace
    does not hold live were allocated before it began and never freed: they are live from time 0 to the end."""
    by_device = {device.device: device for device in devices}
    segments = snapshot["segments"]
    if not isinstance(segments, list):
        raise SnapshotError(f"{path}: 'segments' is {type(segments).__name__}, not a list; the snapshot is damaged")
    for number, segment in enumerate(segments):
        place = Place(path, label=f"segment {number}")
        if not isinstance(segment, dict):
            place.fail(f"the segment is {type(segment).__name__}, not a dict; the snapshot is damaged")
        device = by_device.get(segment_field(segment, "device", int, place))
        if device is None:
            continue  # a device not converted
        stream = stream_handle(segment_field(segment, "stream", int, place), place)
        for block_number, block in enumerate(segment_field(segment, "blocks", list, place)):
            block_place = Place(path, label=f"segment {number}, block {block_number}")
            if not isinstance(block, dict):
                block_place.fail(f"the block is {type(block).__name__}, not a dict; the snapshot is damaged")
            if segment_field(block, "state", str, block_place) != "active_allocated":
                continue
            address = unsigned(segment_field(block, "address", int, block_place), "address", block_place)
            requested = unsigned(segment_field(block, "requested_size", int, block_place), "requested_size",
                                 block_place)
            if address not in device.live_at_end:
                device.live_throughout.append(Event(0, device.device, KIND_ALLOCATE, address, requested, stream))


def check_times(entries: list[Entry], path: str) -> bool:
    """True when every entry has 'time_us' (PyTorch 2.1 and later), False when none has; a mix is an error."""
    timed = [entry for entry in entries if entry.time_us is not None]
    if timed and len(timed) != len(entries):
        untimed = next(entry for entry in entries if entry.time_us is None)
        Place(path, untimed.device, untimed.index).fail(
            "'time_us' is missing while other entries have it; PyTorch times every entry or none: the snapshot is "
            "damaged")
    return bool(timed)


@dataclass
class Conversion:
    devices: list[DeviceEvents]
    start_us: int  # time of the first entry, 0 without times
    has_times: bool

    def ordered_events(self) -> Iterator[Event]:
        """Blocks live at the start, then every device's events merged by time (each device's own order kept)."""
        for device in self.devices:
            yield from device.live_at_start
            yield from device.live_throughout
        yield from heapq.merge(*(device.events for device in self.devices), key=lambda event: event.time_us)


def convert(snapshot: Any, path: str, only_device: int | None) -> Conversion:
    traces = device_traces(snapshot, path)
    if only_device is not None and not 0 <= only_device < len(traces):
        raise SnapshotError(f"{path}: --device {only_device}, but the snapshot has traces of devices 0 .. "
                            f"{len(traces) - 1}; pick one of them")
    chosen = [only_device] if only_device is not None else range(len(traces))
    sites = SiteCache()
    checked = {device: [check_entry(raw, Place(path, device, index), sites)
                        for index, raw in enumerate(traces[device])] for device in chosen}
    all_entries = [entry for entries in checked.values() for entry in entries]
    has_times = check_times(all_entries, path)
    start_us = min((entry.time_us or 0 for entry in all_entries), default=0) if has_times else 0
    latest = max(all_entries, key=lambda entry: entry.time_us or 0, default=None)
    if latest is not None and latest.time_us is not None and (latest.time_us - start_us) * 1000 >= U64_LIMIT:
        Place(path, latest.device, latest.index).fail(
            f"'time_us' is {latest.time_us}, more than 2^64 ns after the first entry ({start_us}); the snapshot is "
            f"damaged")
    devices = [convert_device(entries, device, path) for device, entries in checked.items()
               if entries or device == only_device]
    add_blocks_live_throughout(snapshot, devices, path)
    return Conversion(devices, start_us, has_times)


# --- writing ---

class TraceWriter:
    """Appends records to a plimsoll trace file, defining each string before the first record that uses it."""

    def __init__(self, out: BinaryIO, start_unix_ns: int) -> None:
        self.out = out
        self.records = 0
        self.string_ids: dict[tuple[int, str], int] = {}
        self.strings_per_table: dict[int, int] = {}
        out.write(HEADER.pack(MAGIC, FORMAT_VERSION, EVENT_RECORD.size, start_unix_ns, 0))

    def string_id(self, table: int, text: str) -> int:
        if not text:
            return 0
        known = self.string_ids.get((table, text))
        if known is not None:
            return known
        string_id = self.strings_per_table.get(table, 0) + 1
        self.strings_per_table[table] = string_id
        self.string_ids[(table, text)] = string_id
        data = text.encode("utf-8", errors="backslashreplace")[:MAX_STRING_BYTES]
        padding = -len(data) % 8
        self.out.write(STRING_RECORD.pack(KIND_STRING, table, 0, string_id, len(data), 0) + data + bytes(padding))
        self.records += 1
        return string_id

    def event(self, kind: int, device: str, time_ns: int, ident: int, size: int, stream: int, site: str) -> None:
        device_id = self.string_id(TABLE_DEVICE, device)
        site_id = self.string_id(TABLE_SITE, site)
        if kind == KIND_MARKER:
            ident = self.string_id(TABLE_MARKER, SNAPSHOT_MARKER)
        self.out.write(EVENT_RECORD.pack(kind, 0, device_id, 0, 0, 0, site_id, time_ns, ident, size, stream))
        self.records += 1

    def close(self, time_ns: int) -> None:
        self.out.write(EVENT_RECORD.pack(KIND_END, 0, 0, 0, 0, 0, 0, time_ns, self.records, 0, 0))


def device_name(device: int) -> str:
    return f"cuda:{device}"


def write_trace(conversion: Conversion, out_path: str) -> dict[int, int]:
    """Writes the trace next to `out_path` and renames it into place, so a failure leaves no half-written file.
    Returns the number of events of each kind."""
    counts = dict.fromkeys(KIND_NAMES, 0)
    temporary = f"{out_path}.partial"
    last_ns = 0
    try:
        with open(temporary, "wb") as out:
            writer = TraceWriter(out, conversion.start_us * 1000)
            for event in conversion.ordered_events():
                # Blocks live at the start carry time 0, which is before start_us: they land at 0.
                time_ns = max(event.time_us - conversion.start_us, 0) * 1000
                last_ns = max(last_ns, time_ns)
                writer.event(event.kind, device_name(event.device), time_ns, event.id, event.bytes, event.stream,
                             event.site)
                counts[event.kind] += 1
            writer.close(last_ns)
        os.replace(temporary, out_path)
    except OSError as error:
        raise SnapshotError(f"{out_path}: cannot write the trace: {error.strerror}; pass a path in a writable "
                            f"folder") from None
    return counts


def warn_live_at_start(conversion: Conversion, path: str) -> None:
    for device in conversion.devices:
        name = device_name(device.device)
        if device.live_at_start:
            total = sum(event.bytes for event in device.live_at_start)
            print(f"warning: {path}: {name}: {len(device.live_at_start)} blocks ({total} bytes) are freed but never "
                  f"allocated in the trace: they were live when recording began (or the max_entries ring buffer "
                  f"dropped their allocations); they are allocated at time 0 with the size their "
                  f"'{device.free_action}' reports", file=sys.stderr)
        if device.live_throughout:
            total = sum(event.bytes for event in device.live_throughout)
            print(f"warning: {path}: {name}: {len(device.live_throughout)} blocks ({total} bytes) are allocated in "
                  f"the snapshot's segments but not in the trace: they were allocated before recording began and "
                  f"never freed; they are allocated at time 0", file=sys.stderr)


def summary(conversion: Conversion, counts: dict[int, int], path: str, out_path: str) -> str:
    total = sum(counts.values())
    kinds = ", ".join(f"{counts[kind]} {name}" for kind, name in KIND_NAMES.items() if counts[kind])
    names = ", ".join(device_name(device.device) for device in conversion.devices)
    if conversion.has_times:
        last_us = max((event.time_us for device in conversion.devices for event in device.events), default=0)
        span = f"{max(last_us - conversion.start_us, 0) / 1e6:.6f} s"
    else:
        span = "no times (the snapshot predates PyTorch 2.1's time_us)"
    devices = f"{len(conversion.devices)} device{'' if len(conversion.devices) == 1 else 's'}"
    return (f"{path} -> {out_path}: {total} events ({kinds or 'none'}) on {devices} ({names or 'none'}), "
            f"time span {span}")


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Convert a PyTorch CUDA memory snapshot (torch.cuda.memory._dump_snapshot) into a plimsoll "
                    "trace (docs/trace-format.md).")
    parser.add_argument("snapshot", help="the pickle torch.cuda.memory._dump_snapshot() wrote")
    parser.add_argument("output", help="the plimsoll trace to write")
    parser.add_argument("--device", type=int, metavar="N", help="convert only CUDA device N (default: all)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    arguments = parse_arguments(argv)
    try:
        conversion = convert(load_snapshot(arguments.snapshot), arguments.snapshot, arguments.device)
        counts = write_trace(conversion, arguments.output)
    except SnapshotError as error:
        print(f"to_plimsoll.py: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    warn_live_at_start(conversion, arguments.snapshot)
    print(summary(conversion, counts, arguments.snapshot, arguments.output), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
