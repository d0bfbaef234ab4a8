"""Background checkpoints: what is saved is the state at the call, errors reach the caller."""

import errno
import os

import numpy as np
import pytest

from ooc.runs import rundir as R
from ooc.runs.rundir import RunDir, RunError


def _run(tmp_path):
    return RunDir.create(str(tmp_path / "run"), {"solver": "test"})


def test_background_checkpoint_saves_the_state_at_the_call(tmp_path):
    rd = _run(tmp_path)
    w = np.arange(5.0)
    rd.save_checkpoint({"w": w, "v": w}, {"seq": 1, "epoch": 3}, background=True)
    w[:] = -1.0  # the caller goes on updating its arrays
    arrays, meta = rd.load_checkpoint()  # waits for the write
    assert np.array_equal(arrays["w"], np.arange(5.0)) and np.array_equal(arrays["v"], np.arange(5.0))
    assert meta == {"seq": 1, "epoch": 3}
    rd.save_checkpoint({"w": w}, {"seq": 2, "epoch": 4}, background=True)
    rd.wait_checkpoint()
    with open(os.path.join(rd.path, "LATEST")) as f:
        assert f.read() == "ckpt-000002"
    assert sorted(e for e in os.listdir(rd.state) if e.startswith("ckpt")) == ["ckpt-000002"]


def test_background_checkpoint_error_is_raised_by_the_next_wait(tmp_path, monkeypatch):
    rd = _run(tmp_path)
    rd.save_checkpoint({"w": np.ones(3)}, {"seq": 1})

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(R.np, "savez", full)
    rd.save_checkpoint({"w": np.zeros(3)}, {"seq": 2}, background=True)
    with pytest.raises(RunError, match="space"):
        rd.wait_checkpoint()
    rd.wait_checkpoint()  # reported once
    monkeypatch.undo()
    arrays, meta = rd.load_checkpoint()  # the last complete checkpoint is intact
    assert meta["seq"] == 1 and np.array_equal(arrays["w"], np.ones(3))
    assert not [e for e in os.listdir(rd.state) if ".tmp-" in e]


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
@pytest.mark.parametrize("chunk", [8, 24, 1 << 20])
def test_npz_checksums_streams_what_array_checksum_gives(tmp_path, chunk, save):
    from ooc.fsutil import array_checksum, npz_checksums

    rng = np.random.default_rng(0)
    arrays = {"w": rng.standard_normal((3, 1001)), "a": rng.standard_normal(17).astype(np.float32),
              "i": np.arange(10, dtype=np.int64), "e": np.zeros((0, 4)), "s": np.float64(2.5),
              "f": np.asfortranarray(rng.standard_normal((4, 5)))}  # Fortran order: loaded whole, same checks
    p = str(tmp_path / "s.npz")
    save(p, **arrays)
    assert npz_checksums(p, chunk=chunk) == {k: array_checksum(np.asarray(a)) for k, a in arrays.items()}
    # a NaN anywhere (here in the last piece) is found; a changed value changes the checksum
    bad = dict(arrays, w=arrays["w"].copy())
    bad["w"][2, -1] = np.nan
    save(p, **bad)
    with pytest.raises(ValueError, match="'w' holds NaN"):
        npz_checksums(p, chunk=chunk)
    save(p, **dict(arrays, f=np.asfortranarray(np.full((4, 5), np.inf))))
    with pytest.raises(ValueError, match="'f' holds NaN"):
        npz_checksums(p, chunk=chunk)
    bad["w"][2, -1] = 1.0
    save(p, **bad)
    assert npz_checksums(p, chunk=chunk)["w"] != array_checksum(arrays["w"])


def test_npz_checksums_sees_a_flipped_byte_in_the_file(tmp_path):
    from ooc.fsutil import array_checksum, npz_checksums

    w = np.arange(1000.0)
    p = tmp_path / "s.npz"
    np.savez(p, w=w)
    raw = bytearray(p.read_bytes())
    at = raw.index(w[500:501].tobytes())  # a byte of the array's data, past the zip and npy headers
    raw[at] ^= 0x10
    p.write_bytes(bytes(raw))
    assert npz_checksums(str(p))["w"] != array_checksum(w)


def test_npz_checksums_refuses_a_truncated_member(tmp_path):
    import zipfile

    from ooc.fsutil import npz_checksums

    p = str(tmp_path / "s.npz")
    np.savez(p, w=np.arange(100.0))
    with zipfile.ZipFile(p) as z:
        raw = z.read("w.npy")
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("w.npy", raw[:-16])  # a well-formed zip whose array lacks its last two items
    with pytest.raises(ValueError, match="truncated"):
        npz_checksums(p)
