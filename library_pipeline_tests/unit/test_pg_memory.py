"""The embedded server's shared_buffers by default (serving/pgconf.py): a quarter of the
memory the process may use, a container's limit counted where it is lower than the
machine's."""

from __future__ import annotations

from pathlib import Path

from serving.pgconf import AUTO_MAX_MB, MIN_MB, shared_buffers_mb, usable_memory_mb


def test_a_container_limit_below_the_machine_decides(tmp_path: Path):
    limit = tmp_path / "memory.max"
    limit.write_text("2147483648\n")
    assert usable_memory_mb((limit,)) == 2048
    assert shared_buffers_mb(0, (limit,)) == 512


def test_no_limit_leaves_the_machines_memory(tmp_path: Path):
    machine = usable_memory_mb(())
    assert machine is not None and machine > 0
    unlimited_v2 = tmp_path / "memory.max"
    unlimited_v2.write_text("max\n")
    unlimited_v1 = tmp_path / "memory.limit_in_bytes"
    unlimited_v1.write_text(f"{2**63 - 4096}\n")   # cgroup v1's "no limit"
    assert usable_memory_mb((unlimited_v2, unlimited_v1, tmp_path / "absent")) == machine
    assert shared_buffers_mb(0, (unlimited_v2,)) == max(MIN_MB, min(AUTO_MAX_MB, machine // 4))


def test_bounds_and_an_explicit_setting(tmp_path: Path):
    small, large = tmp_path / "small", tmp_path / "large"
    small.write_text(str(256 * 2**20))
    large.write_text(str(2**50))
    assert shared_buffers_mb(0, (small,)) == MIN_MB
    machine = usable_memory_mb(())
    assert shared_buffers_mb(0, (large,)) == max(MIN_MB, min(AUTO_MAX_MB, machine // 4))
    assert shared_buffers_mb(300, (small,)) == 300
