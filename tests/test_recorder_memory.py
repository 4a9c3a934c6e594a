"""The recorder's memory over a long recording (bench/stack_endurance.py runs the hour).

What a recording keeps in memory until the bag is closed is the MCAP writer's index: one chunk
index (about 0.7 KiB) per chunk of about 1 MiB of messages, nothing per message. What made the
recorder's resident memory creep was glibc keeping the megabyte blocks each chunk allocates and
frees in its arenas; recorder_node has them unmapped when freed instead."""

import ctypes
import gc
import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
from mcap.reader import make_reader

from r2s2r.contract import convert
from r2s2r.contract.types import JointSample
from r2s2r.data.episode import EpisodeWriter
from r2s2r.robots import get_robot

FR3 = get_robot("franka_fr3")


def _traced_after(write, writer: EpisodeWriter) -> int:
    write()
    writer._bag._writer.flush()  # the chunk in progress written: only what the writer keeps is left
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def test_a_recording_keeps_its_chunk_index_in_memory_and_nothing_per_message(tmp_path):
    names = tuple(FR3.joint_names) + ("fr3_finger_joint1", "fr3_finger_joint2")
    rng = np.random.default_rng(0)
    states = [convert.joint_state_msg(JointSample(0.004 * k, names, *rng.normal(size=(3, len(names)))))
              for k in range(64)]
    command = convert.float_array_msg(FR3.home_positions, "arm")
    t = [0.0]

    def second(seconds: int):  # the bench's rates: joint states at 250 Hz, the arm's commands at 100 Hz
        def write():
            for _ in range(seconds):
                for k in range(250):
                    writer.write("joint_states", states[k % len(states)], t[0] + k * 0.004)
                    if k % 5 < 2:
                        writer.write("arm_position_controller/commands", command, t[0] + k * 0.004)
                t[0] += 1.0
        return write

    path = tmp_path / "long.mcap"
    writer = EpisodeWriter(path, FR3.name)
    tracemalloc.start()
    try:
        before = _traced_after(second(10), writer)
        written = writer.count
        after = _traced_after(second(120), writer)
        written = writer.count - written
    finally:
        tracemalloc.stop()
        writer.close()
    with open(path, "rb") as f:
        chunks = len(make_reader(f).get_summary().chunk_indexes)
    assert chunks >= 15  # 1 MiB each, about 8 s of these messages
    kept = after - before  # measured: about 1 KiB a chunk, 0.4 bytes a message
    assert kept / written < 2, f"{kept} bytes kept for {written} messages: bookkeeping per message"
    assert kept < 2048 * chunks, f"{kept} bytes kept for {chunks} chunks"


PROBE = textwrap.dedent("""
    import ctypes
    libc = ctypes.CDLL(None)
    class Info(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                         "fsmblks", "uordblks", "fordblks", "keepcost")]
    libc.mallinfo2.restype = Info
    libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]

    def mapped_on_its_own():
        libc.free(libc.malloc(4 << 20))  # glibc's default raises its threshold to a freed mapped block's size
        before = libc.mallinfo2().hblkhd
        block = libc.malloc(2 << 20)  # so this one would come from an arena, and stay there once freed
        mapped = libc.mallinfo2().hblkhd - before >= 2 << 20
        libc.free(block)
        return mapped
""")


def _probe(body: str) -> str:
    result = subprocess.run([sys.executable, "-c", PROBE + textwrap.dedent(body)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def _glibc_with_mallinfo2() -> bool:
    """Every Linux the ROS 2 Jazzy wheels install on has glibc 2.35 or newer: mallopt and mallinfo2."""
    libc = ctypes.CDLL(None)
    return sys.platform.startswith("linux") and hasattr(libc, "mallopt") and hasattr(libc, "mallinfo2")


def test_the_recorder_process_unmaps_large_blocks_when_they_are_freed():
    if not _glibc_with_mallinfo2():  # macOS, musl: no such malloc setting, and the function says it did nothing
        from r2s2r.processes import return_large_blocks_to_the_os
        assert return_large_blocks_to_the_os() is False
        return
    default = _probe("print(mapped_on_its_own())")
    assert default == "False"  # what the recorder met: large blocks kept in the arenas
    recorder = _probe("""
        import r2s2r.nodes.recorder_node as recorder_node
        recorder_node.run = lambda node, args: print(mapped_on_its_own()) or 0  # what main runs the node with
        assert recorder_node.main([]) == 0
    """)
    assert recorder == "True"
