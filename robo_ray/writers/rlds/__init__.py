"""RLDS (TFDS TFRecord) writer, without TensorFlow: FORMATS.md part 1."""
