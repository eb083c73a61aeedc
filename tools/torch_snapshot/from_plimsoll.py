#!/usr/bin/env python3
"""Exports a plimsoll recording as a PyTorch CUDA memory snapshot, the pickle torch.cuda.memory._snapshot() returns
and torch.cuda.memory._dump_snapshot() writes, so PyTorch's memory visualizer (https://pytorch.org/memory_viz, or
torch/cuda/_memory_viz.py) opens it.

    python3 tools/torch_snapshot/from_plimsoll.py RECORDING.plimsoll OUT.pickle [--device NAME] [--granule BYTES]

RECORDING.plimsoll is plimsoll's binary trace (docs/trace-format.md): PLIMSOLL_TORCH_RECORD of
libplimsoll_torch_cuda.so, Allocator::record_to, plimsoll_record_start. How it maps (docs/pytorch.md, "Memory
snapshots"):
  - device_traces: one list per device ("cuda:N" is PyTorch's device N; other devices follow, in order of first
    appearance), one entry per event: allocate -> "alloc"; free -> "free_requested" then "free_completed" (plimsoll
    records the program's free; reuse by other streams waits for the stream's work, which the recording does not
    time); map/unmap -> "segment_map"/"segment_unmap" of that many bytes (a recording has the mapped bytes, not
    where); oom -> "oom". "time_us" from the recording's clock; "frames" hold the call site (when recorded) and
    the tag. Markers (step boundaries) have no PyTorch action and are left out.
  - segments: the state at the end of the recording: every block still live, grouped into the granule-aligned
    ranges that hold them (default 2 MiB, CUDA's granule), the gaps between them as "inactive" blocks. Granules
    that were mapped but held no live block at the end are not known to the recording and are not listed.

Standard library only, like to_plimsoll.py (which reads the result back). Exit status: 0 exported, 2 bad input (the
message names the file, the record and the fix).
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import struct
import sys
from dataclasses import dataclass, field
from typing import NoReturn

EXIT_BAD_INPUT = 2

# --- the input format (docs/trace-format.md; C++: src/telemetry/traces/trace_binary.hpp) ---

MAGIC = b"PLIMSOLL"
FORMAT_VERSION = 1
HEADER = struct.Struct("<8sIIQQ")  # magic, version, event record size, start (ns since the epoch), reserved
# kind, flags, device, tag, reserved, thread, site, time, id, bytes, stream
EVENT_RECORD = struct.Struct("<BBHHHIIQQQQ")
STRING_RECORD = struct.Struct("<BBHIII")  # kind, table, reserved, id, length, reserved
KIND_ALLOCATE, KIND_FREE, KIND_MAP, KIND_UNMAP, KIND_OOM, KIND_MARKER, KIND_STRING, KIND_END = range(1, 9)
TABLE_TAG, TABLE_SITE, TABLE_MARKER, TABLE_DEVICE = 1, 2, 3, 4

QUANTUM = 256  # plimsoll rounds every block to 256 bytes
SITE_PATTERN = re.compile(r"^(?P<name>.*) \((?P<file>[^()]*):(?P<line>\d+)\)$")  # "function (file:line)"


class RecordingError(Exception):
    """Input that cannot be exported; the message names the file, the record, what is wrong and the fix."""


def fail(path: str, what: str) -> NoReturn:
    raise RecordingError(f"{path}: {what}")


@dataclass
class Event:
    kind: int
    device: int  # string id in the device table
    tag: int
    site: int
    time_ns: int
    ident: int
    size: int
    stream: int


@dataclass
class Recording:
    start_unix_ns: int
    events: list[Event] = field(default_factory=list)
    strings: dict[tuple[int, int], str] = field(default_factory=dict)  # (table, id) -> text
    complete: bool = False


def read_recording(path: str) -> Recording:
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as error:
        fail(path, f"cannot read the recording: {error.strerror}; check the path")
    if len(data) < HEADER.size or data[:8] != MAGIC:
        fail(path, "not a plimsoll recording (it does not start with PLIMSOLL); pass a file written by "
                   "PLIMSOLL_TORCH_RECORD, Allocator::record_to or plimsoll_record_start")
    magic, version, record_size, start, _ = HEADER.unpack_from(data, 0)
    if version != FORMAT_VERSION:
        fail(path, f"trace format version {version}; this exporter reads version {FORMAT_VERSION}: update "
                   f"tools/torch_snapshot/from_plimsoll.py")
    if record_size != EVENT_RECORD.size:
        fail(path, f"event records of {record_size} bytes, but version 1 has {EVENT_RECORD.size}: the file is "
                   f"damaged")
    recording = Recording(start)
    at = HEADER.size
    number = 0
    while at < len(data):
        kind = data[at]
        if kind == KIND_STRING:
            if at + STRING_RECORD.size > len(data):
                break  # cut short while writing: keep what came before
            _, table, _, string_id, length, _ = STRING_RECORD.unpack_from(data, at)
            end = at + STRING_RECORD.size + length
            if end > len(data):
                break
            recording.strings[(table, string_id)] = data[at + STRING_RECORD.size:end].decode("utf-8", "replace")
            at = end + (-length % 8)
        elif KIND_ALLOCATE <= kind <= KIND_END:
            if at + EVENT_RECORD.size > len(data):
                break
            kind, _, device, tag, _, _, site, time_ns, ident, size, stream = EVENT_RECORD.unpack_from(data, at)
            at += EVENT_RECORD.size
            if kind == KIND_END:
                recording.complete = True
                break
            recording.events.append(Event(kind, device, tag, site, time_ns, ident, size, stream))
        else:
            fail(path, f"record {number} at byte {at} has kind {kind}, which version 1 does not have: the file is "
                       f"damaged")
        number += 1
    return recording


# --- the output: torch.cuda.memory._snapshot() ---

def frames_of(recording: Recording, event: Event) -> list[dict[str, object]]:
    """The call site as PyTorch writes a frame, then the tag (with no file, so readers looking for the user's frame
    skip it)."""
    frames: list[dict[str, object]] = []
    site = recording.strings.get((TABLE_SITE, event.site), "") if event.site else ""
    if site:
        match = SITE_PATTERN.match(site)
        if match:
            frames.append({"filename": match["file"], "line": int(match["line"]), "name": match["name"]})
        else:
            frames.append({"filename": "??", "line": 0, "name": site})
    if event.tag:
        frames.append({"filename": "", "line": 0, "name": "plimsoll tag: " + recording.strings.get(
            (TABLE_TAG, event.tag), f"tag {event.tag}")})
    return frames


def signed_stream(stream: int) -> int:
    """PyTorch keeps the cudaStream_t as a signed 64-bit integer."""
    return stream - (1 << 64) if stream >= 1 << 63 else stream


def device_indices(recording: Recording, only: str | None, path: str) -> dict[int, int]:
    """Device string id -> PyTorch device index: cuda:N is N, the others follow the highest N in order of first
    appearance; with `only`, that device alone, as device 0 unless it is cuda:N."""
    names = {string_id: text for (table, string_id), text in recording.strings.items() if table == TABLE_DEVICE}
    seen: list[int] = []
    for event in recording.events:
        if event.device not in seen:
            seen.append(event.device)
    if only is not None:
        matching = [d for d in seen if names.get(d, "") == only]
        if not matching:
            fail(path, f"--device {only}, but the recording has {', '.join(names.get(d, '(unnamed)') for d in seen)}"
                       f"; pick one of them")
        seen = matching
    cuda = re.compile(r"^cuda:(\d+)$")
    indices: dict[int, int] = {}
    for device in seen:
        match = cuda.match(names.get(device, ""))
        if match:
            indices[device] = int(match[1])
    following = max(indices.values(), default=-1) + 1
    for device in seen:
        if device not in indices:
            indices[device] = 0 if only is not None else following
            following += 1
    return indices


def segments_of(live: dict[int, tuple[int, int, list[dict[str, object]]]], device: int, granule: int,
                ) -> list[dict[str, object]]:
    """The live blocks (address -> (requested, stream, frames)) grouped into granule-aligned segments, holes as
    inactive blocks, so that each segment's blocks tile it (what torch's _memory_viz.stats asserts)."""
    segments: list[dict[str, object]] = []
    current: dict[str, object] | None = None
    cursor = 0
    for address in sorted(live):
        requested, stream, frames = live[address]
        size = max((requested + QUANTUM - 1) // QUANTUM * QUANTUM, QUANTUM)
        if current is not None and address < cursor:  # ids that are not addresses may overlap: clip
            address = cursor
        first = address // granule * granule
        end = -(-(address + size) // granule) * granule
        if current is None or first > int(current["address"]) + int(current["total_size"]):
            current = {"device": device, "address": first, "total_size": 0, "allocated_size": 0, "active_size": 0,
                       "requested_size": 0, "stream": signed_stream(stream), "segment_type": "large",
                       "segment_pool_id": (0, 0), "is_expandable": True, "frames": [], "blocks": []}
            segments.append(current)
            cursor = first
        blocks = current["blocks"]
        assert isinstance(blocks, list)
        if address > cursor:
            blocks.append({"address": cursor, "size": address - cursor, "requested_size": 0, "state": "inactive",
                           "frames": []})
        blocks.append({"address": address, "size": size, "requested_size": requested, "state": "active_allocated",
                       "frames": frames})
        cursor = address + size
        segment_end = max(int(current["address"]) + int(current["total_size"]), end)
        current["total_size"] = segment_end - int(current["address"])
        current["allocated_size"] = int(current["allocated_size"]) + size
        current["active_size"] = int(current["active_size"]) + size
        current["requested_size"] = int(current["requested_size"]) + requested
    for segment in segments:  # the tail of each segment after its last block
        blocks = segment["blocks"]
        assert isinstance(blocks, list)
        last = blocks[-1]
        tail = int(segment["address"]) + int(segment["total_size"]) - (int(last["address"]) + int(last["size"]))
        if tail > 0:
            blocks.append({"address": int(last["address"]) + int(last["size"]), "size": tail, "requested_size": 0,
                           "state": "inactive", "frames": []})
    return segments


def export(recording: Recording, path: str, only: str | None, granule: int) -> dict[str, object]:
    indices = device_indices(recording, only, path)
    traces: list[list[dict[str, object]]] = [[] for _ in range(max(indices.values(), default=-1) + 1)]
    live: dict[int, dict[int, tuple[int, int, list[dict[str, object]]]]] = {index: {} for index in indices.values()}
    start_us = recording.start_unix_ns // 1000
    for number, event in enumerate(recording.events):
        index = indices.get(event.device)
        if index is None or event.kind == KIND_MARKER:
            continue
        entry: dict[str, object] = {"addr": event.ident, "size": event.size, "stream": signed_stream(event.stream),
                                    "time_us": start_us + event.time_ns // 1000, "frames": frames_of(recording, event)}
        if event.kind == KIND_ALLOCATE:
            if event.ident == 0:
                fail(path, f"event {number} allocates id 0; plimsoll never writes that: the file is damaged")
            live[index][event.ident] = (event.size, event.stream, entry["frames"])  # type: ignore[assignment]
            traces[index].append({"action": "alloc", **entry})
        elif event.kind == KIND_FREE:
            requested = live[index].pop(event.ident, (event.size, 0, []))[0]
            entry["size"] = requested
            traces[index].append({"action": "free_requested", **entry})
            traces[index].append({"action": "free_completed", **entry})
        elif event.kind in (KIND_MAP, KIND_UNMAP):
            traces[index].append({"action": "segment_map" if event.kind == KIND_MAP else "segment_unmap", **entry})
        elif event.kind == KIND_OOM:
            traces[index].append({"action": "oom", **entry, "addr": 0, "device_free": 0})
    segments = [segment for index in sorted(live) for segment in segments_of(live[index], index, granule)]
    return {"segments": segments, "device_traces": traces,
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": True,
                                   "exported_by": "plimsoll tools/torch_snapshot/from_plimsoll.py"}}


def write_pickle(snapshot: dict[str, object], out_path: str) -> None:
    temporary = f"{out_path}.partial"
    try:
        with open(temporary, "wb") as out:
            pickle.dump(snapshot, out, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(temporary, out_path)
    except OSError as error:
        raise RecordingError(f"{out_path}: cannot write the snapshot: {error.strerror}; pass a path in a writable "
                             f"folder") from None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description="Export a plimsoll recording as a PyTorch CUDA memory snapshot (torch.cuda.memory._snapshot) "
                    "for PyTorch's memory visualizer.")
    parser.add_argument("recording", help="the plimsoll recording (binary trace) to read")
    parser.add_argument("output", help="the pickle to write")
    parser.add_argument("--device", metavar="NAME", help="export only this device (e.g. cuda:0; default: all)")
    parser.add_argument("--granule", type=int, default=2 << 20, metavar="BYTES",
                        help="segment alignment of the end state (default 2 MiB, CUDA's granule)")
    arguments = parser.parse_args(argv)
    try:
        if arguments.granule <= 0 or arguments.granule & (arguments.granule - 1):
            raise RecordingError(f"--granule {arguments.granule} is not a power of two; pass e.g. 2097152")
        recording = read_recording(arguments.recording)
        snapshot = export(recording, arguments.recording, arguments.device, arguments.granule)
        write_pickle(snapshot, arguments.output)
    except RecordingError as error:
        print(f"from_plimsoll.py: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    traces = snapshot["device_traces"]
    assert isinstance(traces, list)
    if not recording.complete:
        print(f"warning: {arguments.recording}: the recording has no end record (the process died while recording, "
              f"or it is still open); exported the {len(recording.events)} events before the cut", file=sys.stderr)
    print(f"{arguments.recording} -> {arguments.output}: {sum(len(t) for t in traces)} trace entries on "
          f"{len(traces)} device{'s' if len(traces) != 1 else ''}, {len(snapshot['segments'])} segments "  # type: ignore[arg-type]
          f"at the end", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
