"""Our TensorFlow-free Example encoder and TFRecord framing, checked against TensorFlow's own parsers."""
from __future__ import annotations

import io

import numpy as np
import pytest

from robo_ray.formats.rlds.example import decode_example, encode_example
from robo_ray.formats.rlds.tfrecord import frame_record, read_records

FEATURES = {
    "steps/action": np.arange(12, dtype=np.float32).reshape(3, 4) / 7,
    "steps/is_first": np.array([True, False, False]),
    "steps/language_instruction": [b"pick", "plätze".encode(), b""],
    "steps/big": np.array([0, 127, 128, -1, -(2 ** 63), 2 ** 63 - 1], dtype=np.int64),
    "episode_metadata/episode_id": np.array([7], dtype=np.int64),
    "steps/empty": np.zeros(0, dtype=np.float32),
}


def test_example_parses_in_tensorflow() -> None:
    import tensorflow as tf  # extra [tf], installed by `make test`: a missing TF must fail, not skip
    ex = tf.train.Example.FromString(encode_example(FEATURES))
    f = ex.features.feature
    np.testing.assert_array_equal(np.array(f["steps/action"].float_list.value, np.float32),
                                  FEATURES["steps/action"].reshape(-1))
    assert list(f["steps/is_first"].int64_list.value) == [1, 0, 0]
    assert list(f["steps/big"].int64_list.value) == FEATURES["steps/big"].tolist()
    assert list(f["steps/language_instruction"].bytes_list.value) == FEATURES["steps/language_instruction"]
    assert list(f["episode_metadata/episode_id"].int64_list.value) == [7]
    assert len(f["steps/empty"].float_list.value) == 0


def test_encoding_is_deterministic_and_key_order_independent() -> None:
    reordered = dict(reversed(list(FEATURES.items())))
    assert encode_example(FEATURES) == encode_example(reordered)


def test_decode_roundtrip() -> None:
    out = decode_example(encode_example(FEATURES))
    np.testing.assert_array_equal(out["steps/action"], FEATURES["steps/action"].reshape(-1))
    assert out["steps/big"].tolist() == FEATURES["steps/big"].tolist()
    assert out["steps/language_instruction"] == FEATURES["steps/language_instruction"]


def test_tfrecord_framing_reads_in_tensorflow(tmp_path) -> None:
    import tensorflow as tf
    payloads = [encode_example(FEATURES), b"", b"x" * 100_000]
    path = tmp_path / "f.tfrecord"
    path.write_bytes(b"".join(frame_record(p) for p in payloads))
    got = [r.numpy() for r in tf.data.TFRecordDataset(str(path))]
    assert got == payloads
    with open(path, "rb") as f:
        assert list(read_records(f)) == payloads


def test_corrupted_record_is_detected(tmp_path) -> None:
    data = bytearray(frame_record(encode_example(FEATURES)))
    data[20] ^= 0xFF
    with pytest.raises(ValueError, match="CRC"):
        list(read_records(io.BytesIO(bytes(data))))
    with pytest.raises(ValueError, match="truncated"):
        list(read_records(io.BytesIO(bytes(data[:-3]))))


# item lengths whose varints take 1, 2, 3 and 4 bytes (the walker reads 2 and 3 bytes in one step)
BOUNDARY_LENGTHS = [0, 1, 127, 128, 129, 300, 16383, 16384, 16385, 2 ** 21 - 1, 2 ** 21]


def test_bytes_items_of_every_varint_length_decode_as_written() -> None:
    rng = np.random.default_rng(5)
    items = [rng.bytes(n) for n in BOUNDARY_LENGTHS]
    for feats in ({"steps/image": items}, {"steps/image": items[::-1], "steps/x": np.arange(3, dtype=np.int64)}):
        got = decode_example(encode_example(feats))
        assert got["steps/image"] == feats["steps/image"]


@pytest.mark.parametrize("keep", [1, 2])
def test_an_item_length_cut_by_the_end_of_its_list_is_corrupt(keep: int) -> None:
    """A BytesList ending inside its last item's 3-byte length (the enclosing lengths consistent): corrupt."""
    from robo_ray.formats.rlds.example import _len_field

    def varint(n: int) -> bytes:
        out = bytearray()
        while n >= 0x80:
            out.append(n & 0x7F | 0x80)
            n >>= 7
        return bytes(out + bytes([n]))

    items = _len_field(1, b"a" * 300) + (b"\x0a" + varint(20000))[:1 + keep]  # the last length cut after `keep`
    feature = _len_field(1, items)  # Feature.bytes_list
    entry = _len_field(1, b"steps/image") + _len_field(2, feature)
    example = _len_field(1, _len_field(1, entry))  # Example.features.feature[...]
    with pytest.raises(ValueError):
        decode_example(example)
    whole = _len_field(1, _len_field(1, _len_field(1, b"steps/image") + _len_field(2, _len_field(1, _len_field(
        1, b"a" * 300) + _len_field(1, b"b" * 20000)))))
    assert decode_example(whole)["steps/image"] == [b"a" * 300, b"b" * 20000]  # the same, uncut, decodes
