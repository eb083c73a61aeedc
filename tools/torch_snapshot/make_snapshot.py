#!/usr/bin/env python3
"""Writes synthetic PyTorch CUDA memory snapshots, for testing to_plimsoll.py where no GPU (or no PyTorch) is.

    python3 tools/torch_snapshot/make_snapshot.py OUT.pickle [--seed S] [--steps N] [--layers N] [--max-bytes B]
        [--devices N] [--oom] [--max-entries N] [--no-completed-frees] [--no-times] [--cpp-frames] [--expandable]
        [--expected EXPECTED.tsv]

The pickle has the layout torch.cuda.memory._dump_snapshot() writes in PyTorch 2.x: the dict that
torch.cuda.memory._snapshot() returns. Keys were checked against _snapshot's docstring (torch/cuda/memory.py) and
THCPModule_memorySnapshot (torch/csrc/cuda/Module.cpp) on PyTorch's main branch as of 2025; "time_us" exists
since PyTorch 2.1, "allocator_settings" and "external_annotations" in later 2.x releases (readers ignore them):
    {"segments": [Segment], "device_traces": [[TraceEntry] per device], "allocator_settings": {...},
     "external_annotations": []}
    Segment: device, address, total_size, allocated_size, active_size, requested_size, stream, segment_type
             ("small"/"large"), segment_pool_id (a tuple), is_expandable, frames, blocks
    Block: address, size, requested_size, state ("active_allocated", "active_pending_free", "inactive"), frames
    TraceEntry: action, addr (device_free for "oom"), size, stream, time_us (microseconds since the epoch, from
                PyTorch 2.1 on), frames
    Frame: filename, line, name; innermost first

The workload is a small training loop on each device, simulated with a caching allocator of PyTorch's shape (blocks
rounded to 512 bytes, cached per stream and size, carved from 2 MiB segments, or larger ones for large blocks):
parameters allocated once, then per step a forward pass that allocates one activation per layer (odd layers on a
side stream, whose frees complete later, as record_stream() makes them), a backward pass that allocates gradients
and frees the activations, and the gradients freed at the end of the step; then the cache is emptied
(segment_free / segment_unmap of the empty segments), optionally an allocation fails (oom), and the snapshot is
taken ("snapshot" entry). The same seed writes the same bytes.

--expected writes, one tab-separated line per event, what plimsoll::read_trace should read from the converted
snapshot: kind, device, time_ns, id, bytes, stream, call site. It is derived from the simulation's own record of
what it did (which allocation each free ends, which user line each allocation came from), not from the converter.
"""

from __future__ import annotations

import argparse
import pickle
import random
import sys
from dataclasses import dataclass, field
from typing import Any

SEGMENT_BYTES = 2 << 20  # PyTorch's kSmallBuffer / kMinLargeAlloc granularity
LARGE_BLOCK = 1 << 20  # blocks above 1 MiB come from the large pool
BLOCK_ROUNDING = 512  # kMinBlockSize
START_US = 1_700_000_000_000_000  # 2023-11-14, as time_us is microseconds since the epoch
SIDE_STREAM_BASE = 0x55D0C0DE0000
SNAPSHOT_MARKER = "torch memory snapshot"  # what to_plimsoll.py names the "snapshot" action's marker

USER_MODEL = "/home/user/project/model.py"
USER_TRAIN = "/home/user/project/train.py"
TORCH_PYTHON = "/opt/conda/lib/python3.11/site-packages/torch"


def frame(name: str, filename: str, line: int) -> dict[str, Any]:
    return {"filename": filename, "line": line, "name": name}


def site_text(user_frame: dict[str, Any]) -> str:
    return f"{user_frame['name']} ({user_frame['filename']}:{user_frame['line']})"


def stack(user_frame: dict[str, Any], cpp_frames: bool) -> list[dict[str, Any]]:
    """A stack as PyTorch symbolizes it, innermost first: (with stacks="all") the allocator's C++ and the
    interpreter, PyTorch's Python, then the user's frame and its callers."""
    frames = []
    if cpp_frames:
        frames += [
            frame("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned "
                  "long, CUstream_st*)", "/opt/pytorch/c10/cuda/CUDACachingAllocator.cpp", 1141),
            frame("at::detail::empty_generic(c10::ArrayRef<long>, c10::Allocator*)",
                  "/opt/pytorch/aten/src/ATen/EmptyTensor.cpp", 202),
            frame("??", "/opt/conda/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so", 0),
            frame("_PyEval_EvalFrameDefault", "/usr/local/src/conda/python-3.11.7/Python/ceval.c", 5200),
        ]
    frames += [
        frame("forward", f"{TORCH_PYTHON}/nn/modules/linear.py", 116),
        frame("_call_impl", f"{TORCH_PYTHON}/nn/modules/module.py", 1527),
        user_frame,
        frame("train_step", USER_TRAIN, 31),
        frame("main", USER_TRAIN, 58),
    ]
    if cpp_frames:
        frames.append(frame("__libc_start_main", "??", 0))
    return frames


@dataclass
class Block:
    address: int
    size: int  # rounded
    stream: int
    requested: int = 0
    state: str = "inactive"
    frames: list[dict[str, Any]] = field(default_factory=list)
    alloc_entry: int = -1  # index of the entry that allocated it, while active


@dataclass
class Segment:
    address: int
    total_size: int
    stream: int
    large: bool
    blocks: list[Block] = field(default_factory=list)
    carved: int = 0  # bytes handed out as blocks; the rest is one inactive tail

    def has_room(self, size: int) -> bool:
        return self.total_size - self.carved >= size

    def is_empty(self) -> bool:
        return all(block.state == "inactive" for block in self.blocks)


@dataclass
class Truth:
    """What an entry means, recorded as the simulation made it: the oracle for --expected."""
    kind: str  # allocate, free, map, unmap, oom, marker
    addr: int = 0
    size: int = 0
    stream: int = 0
    site: str = ""
    allocated_by: int = -1  # for frees: index of the 'alloc' entry of the block


class Clock:
    """One clock for every device, strictly increasing, so events of different devices never tie."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.now = START_US

    def tick(self) -> int:
        self.now += self.rng.randint(1, 40)
        return self.now


class DeviceSimulation:
    def __init__(self, device: int, options: argparse.Namespace, clock: Clock, rng: random.Random) -> None:
        self.device = device
        self.options = options
        self.clock = clock
        self.rng = rng
        self.entries: list[dict[str, Any]] = []
        self.truths: list[Truth] = []
        self.segments: list[Segment] = []
        self.cache: dict[tuple[int, int], list[Block]] = {}  # (stream, rounded size) -> freed blocks
        self.pending: list[Block] = []  # freed on the side stream, awaiting free_completed
        self.next_segment_address = 0x7F0000000000 + (device << 36)
        self.side_stream = SIDE_STREAM_BASE + device * 0x1000

    def record(self, entry: dict[str, Any], truth: Truth, frames: list[dict[str, Any]] | None = None) -> int:
        if not self.options.no_times:
            entry["time_us"] = self.clock.tick()
        else:
            self.clock.tick()
        entry["frames"] = frames if frames is not None else []
        self.entries.append(entry)
        self.truths.append(truth)
        return len(self.entries) - 1

    def map_segment(self, size: int, stream: int) -> Segment:
        rounded = -(-size // SEGMENT_BYTES) * SEGMENT_BYTES
        segment = Segment(self.next_segment_address, rounded, stream, size > LARGE_BLOCK)
        self.next_segment_address += rounded + SEGMENT_BYTES  # a gap, as cudaMalloc leaves
        self.segments.append(segment)
        action = "segment_map" if self.options.expandable else "segment_alloc"
        self.record({"action": action, "addr": segment.address, "size": rounded, "stream": stream},
                    Truth("map", segment.address, rounded, stream))
        return segment

    def allocate(self, requested: int, stream: int, user_frame: dict[str, Any]) -> Block:
        size = -(-requested // BLOCK_ROUNDING) * BLOCK_ROUNDING
        cached = self.cache.get((stream, size))
        if cached:
            block = cached.pop()
        else:
            segment = next((s for s in self.segments if s.stream == stream and s.large == (size > LARGE_BLOCK)
                            and s.has_room(size)), None) or self.map_segment(size, stream)
            block = Block(segment.address + segment.carved, size, stream)
            segment.carved += size
            segment.blocks.append(block)
        frames = stack(user_frame, self.options.cpp_frames)
        block.requested, block.state, block.frames = requested, "active_allocated", frames
        block.alloc_entry = self.record(
            {"action": "alloc", "addr": block.address, "size": requested, "stream": stream},
            Truth("allocate", block.address, requested, stream, site_text(user_frame)), frames)
        self.complete_pending()  # the side stream caught up while this allocation ran
        return block

    def free(self, block: Block) -> None:
        self.record({"action": "free_requested", "addr": block.address, "size": block.requested,
                     "stream": block.stream}, Truth("free", block.address, block.requested, block.stream,
                                                    allocated_by=block.alloc_entry))
        block.state = "active_pending_free"
        if block.stream == self.side_stream:
            self.pending.append(block)  # still in use by the side stream: completes later
        else:
            self.complete(block)

    def complete(self, block: Block) -> None:
        if not self.options.no_completed_frees:
            self.record({"action": "free_completed", "addr": block.address, "size": block.requested,
                         "stream": block.stream}, Truth("free", block.address, block.requested, block.stream,
                                                        allocated_by=block.alloc_entry))
        block.state, block.frames, block.alloc_entry = "inactive", [], -1
        self.cache.setdefault((block.stream, block.size), []).append(block)

    def complete_pending(self) -> None:
        pending, self.pending = self.pending, []
        for block in pending:
            self.complete(block)

    def empty_cache(self) -> None:
        self.complete_pending()
        action = "segment_unmap" if self.options.expandable else "segment_free"
        for segment in [s for s in self.segments if s.is_empty()]:
            self.segments.remove(segment)
            for block in segment.blocks:
                self.cache[(block.stream, block.size)].remove(block)
            self.record({"action": action, "addr": segment.address, "size": segment.total_size,
                         "stream": segment.stream}, Truth("unmap", segment.address, segment.total_size,
                                                           segment.stream))

    def oom(self, user_frame: dict[str, Any]) -> None:
        requested = 80 << 30
        frames = stack(user_frame, self.options.cpp_frames)
        self.record({"action": "oom", "device_free": 3 << 30, "size": requested, "stream": 0},
                    Truth("oom", 0, requested, 0, site_text(user_frame)), frames)

    def snapshot_taken(self) -> None:
        self.record({"action": "snapshot", "addr": 0, "size": 0, "stream": 0}, Truth("marker"))

    def segment_dicts(self) -> list[dict[str, Any]]:
        result = []
        for segment in self.segments:
            blocks = [{"address": b.address, "size": b.size, "requested_size": b.requested if b.state != "inactive"
                       else 0, "state": b.state, "frames": b.frames} for b in segment.blocks]
            tail = segment.total_size - segment.carved
            if tail:
                blocks.append({"address": segment.address + segment.carved, "size": tail, "requested_size": 0,
                               "state": "inactive", "frames": []})
            result.append({
                "device": self.device, "address": segment.address, "total_size": segment.total_size,
                "allocated_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
                "active_size": sum(b["size"] for b in blocks if b["state"] != "inactive"),
                "requested_size": sum(b["requested_size"] for b in blocks),
                "stream": segment.stream, "segment_type": "large" if segment.large else "small",
                "segment_pool_id": (0, 0), "is_expandable": self.options.expandable, "frames": [],
                "blocks": blocks})
        return result


def layer_sizes(rng: random.Random, layers: int, max_bytes: int) -> list[int]:
    """Activation sizes, one per layer: odd byte counts too, so rounding shows."""
    return [rng.randint(1, max_bytes) for _ in range(layers)]


def simulate(options: argparse.Namespace) -> list[DeviceSimulation]:
    rng = random.Random(options.seed)
    clock = Clock(rng)
    devices = [DeviceSimulation(d, options, clock, random.Random(options.seed * 1000 + d + 1))
               for d in range(options.devices)]
    sizes = {d.device: layer_sizes(d.rng, options.layers, options.max_bytes) for d in devices}
    parameters = {d.device: [d.allocate(size, 0, frame("__init__", USER_MODEL, 10 + layer))
                             for layer, size in enumerate(sizes[d.device])] for d in devices}
    for _ in range(options.steps):
        for d in devices:
            activations = [d.allocate(size, d.side_stream if layer % 2 else 0, frame("forward", USER_MODEL, 20 + layer))
                           for layer, size in enumerate(sizes[d.device])]
            gradients = []
            for layer in reversed(range(options.layers)):
                gradients.append(d.allocate(parameters[d.device][layer].requested, 0,
                                            frame("backward_hook", USER_MODEL, 40 + layer)))
                d.free(activations[layer])
            for gradient in gradients:
                d.free(gradient)
    for d in devices:
        d.empty_cache()
        if options.oom:
            d.oom(frame("grow_batch", USER_TRAIN, 70))
        d.snapshot_taken()
    return devices


def allocator_settings() -> dict[str, Any]:
    return {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
            "expandable_segments": False, "pinned_num_register_threads": 1, "release_lock_on_cudamalloc": False,
            "pinned_use_cuda_host_register": False, "roundup_power2_divisions": {"1": 0}}


def snapshot_of(devices: list[DeviceSimulation], max_entries: int | None) -> dict[str, Any]:
    return {"segments": [segment for d in devices for segment in d.segment_dicts()],
            "device_traces": [d.entries[first_kept(d, max_entries):] for d in devices],
            "allocator_settings": allocator_settings(), "external_annotations": []}


def first_kept(device: DeviceSimulation, max_entries: int | None) -> int:
    """PyTorch's ring buffer keeps the last max_entries entries of each device."""
    return 0 if max_entries is None else max(len(device.entries) - max_entries, 0)


def expected_events(devices: list[DeviceSimulation], options: argparse.Namespace) -> list[tuple[Any, ...]]:
    """(kind, device, time_ns, id, bytes, stream, site) in the order plimsoll reads them."""
    kept = {d.device: first_kept(d, options.max_entries) for d in devices}
    times = [d.entries[i]["time_us"] for d in devices for i in range(kept[d.device], len(d.entries))
             if "time_us" in d.entries[i]]
    start_us = min(times, default=0)
    live_at_start, timed = [], []
    for d in devices:
        window = range(kept[d.device], len(d.entries))
        actions = [d.entries[i]["action"] for i in window]
        free_action = "free_completed" if "free_completed" in actions else "free_requested"
        name = f"cuda:{d.device}"
        for i in window:
            entry, truth = d.entries[i], d.truths[i]
            if truth.kind == "free" and entry["action"] != free_action:
                continue
            if truth.kind == "free" and truth.allocated_by < kept[d.device]:
                # Allocated before the window, freed in it: live from the start.
                live_at_start.append(("allocate", name, 0, truth.addr, truth.size, truth.stream, ""))
            time_ns = (entry["time_us"] - start_us) * 1000 if "time_us" in entry else 0
            size = 0 if truth.kind in ("free", "marker") else truth.size  # read_trace keeps no size on frees
            timed.append((entry.get("time_us", 0), d.device, i,
                          (truth.kind, name, time_ns, truth.addr, size, truth.stream, truth.site)))
        for segment in d.segments:  # allocated before the window, still allocated at the end: live throughout
            for block in segment.blocks:
                if block.state == "active_allocated" and block.alloc_entry < kept[d.device]:
                    live_at_start.append(("allocate", name, 0, block.address, block.requested, block.stream, ""))
    timed.sort(key=lambda item: item[:3])
    return live_at_start + [item[3] for item in timed]


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Write a synthetic PyTorch CUDA memory snapshot (PyTorch 2.x "
                                                 "layout) of a small simulated training loop.")
    parser.add_argument("output", help="the snapshot pickle to write")
    parser.add_argument("--seed", type=int, default=1, help="random seed; the same seed writes the same file")
    parser.add_argument("--steps", type=int, default=3, help="training steps (default 3)")
    parser.add_argument("--layers", type=int, default=6, help="activations per step (default 6)")
    parser.add_argument("--max-bytes", type=int, default=3 << 20, help="largest activation (default 3 MiB)")
    parser.add_argument("--devices", type=int, default=1, help="CUDA devices (default 1)")
    parser.add_argument("--oom", action="store_true", help="end with a failed 80 GiB allocation")
    parser.add_argument("--max-entries", type=int, help="keep the last N entries per device, as "
                                                        "_record_memory_history(max_entries=N) does")
    parser.add_argument("--no-completed-frees", action="store_true",
                        help="record no free_completed, as _record_memory_history(skip_actions=[...]) does")
    parser.add_argument("--no-times", action="store_true", help="no time_us, as before PyTorch 2.1")
    parser.add_argument("--cpp-frames", action="store_true", help="C++ frames too, as stacks='all' records")
    parser.add_argument("--expandable", action="store_true",
                        help="segment_map / segment_unmap, as expandable_segments:True records")
    parser.add_argument("--expected", help="write the events plimsoll should read here (tab-separated)")
    options = parser.parse_args(argv)
    for name in ("steps", "layers", "max_bytes", "devices"):
        if getattr(options, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if options.max_entries is not None and options.max_entries < 1:
        parser.error("--max-entries must be at least 1")
    return options


def main(argv: list[str]) -> int:
    options = parse_arguments(argv)
    devices = simulate(options)
    with open(options.output, "wb") as out:
        pickle.dump(snapshot_of(devices, options.max_entries), out)
    if options.expected:
        with open(options.expected, "w", encoding="utf-8") as out:
            for event in expected_events(devices, options):
                out.write("\t".join(str(field_value) for field_value in event) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
