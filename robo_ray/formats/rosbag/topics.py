"""The features a bag's topics give, with the roles their message types and names suggest (the editable mapping
starts from these): JointState -> state (its position; velocity / effort -> observations), Image /
CompressedImage -> camera (16-bit -> depth), a topic named like a command or an action -> action, std_msgs/String
on a task / instruction topic -> the language, any other numeric message -> an observation. Infrastructure topics
(/rosout, /tf, /clock, ...) are left out."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from robo_ray.episode import FeatureSpec
from robo_ray.formats.rosbag.messages import IMAGE, JOINT_STATE, STRING, NotRead, TopicValue, describe
from robo_ray.readers.base import identifier, unique_names

ACTION_TOPIC = re.compile(r"cmd|command|action", re.I)
LANGUAGE_TOPIC = re.compile(r"task|instruction|language|prompt", re.I)
SKIPPED_TOPICS = {"/rosout", "/rosout_agg", "/parameter_events", "/tf", "/tf_static", "/clock", "/diagnostics",
                  "/events/write_split", "/robot_description"}
OPENCV_PASSTHROUGH = {"8UC3": "bgr8", "8UC4": "bgra8"}  # cv_bridge's encoding of an OpenCV image given none
CAMERA_WORDS = {"image_raw", "image_rect", "image_rect_raw", "image_color", "image_rect_color", "compressed", "image",
                "raw"}


@dataclass(frozen=True)
class Feature:
    """A feature and where it comes from: the topic, its message type and what of each message."""

    spec: FeatureSpec
    topic: str
    msgtype: str
    value: TopicValue


def camera_name(topic: str) -> str:
    parts = [p for p in topic.strip("/").split("/") if p and p not in CAMERA_WORDS]
    name = "_".join(parts) or "main"
    return identifier(re.sub(r"^cam_", "", name))


def declare(firsts: dict[str, tuple[str, Any]], where: str, encodings: dict[str, str] | None = None
            ) -> tuple[dict[str, Feature], str | None, dict[str, str]]:
    """The features of the topics (topic -> (msgtype, first message)), in topic order, the language topic, and the
    topics left out because their messages are not read (topic -> why). `encodings`: Image topics read as the
    encoding given (source.options.encodings)."""
    out: dict[str, Feature] = {}
    left_out: dict[str, str] = {}
    language: str | None = None
    state_taken = action_taken = False
    for topic in sorted(firsts):
        if topic in SKIPPED_TOPICS:
            continue
        msgtype, msg = firsts[topic]
        ident = identifier(topic.strip("/").replace("/", "_"))
        try:
            values = describe(msgtype, msg, f"{where} {topic}", (encodings or {}).get(topic, ""))
        except NotRead as exc:
            hint = ""
            if msgtype == IMAGE and str(msg.encoding) in OPENCV_PASSTHROUGH:  # cv_bridge without an encoding
                hint = (f"; an OpenCV image published without an encoding is BGR: --set 'source.options.encodings="
                        f"{{\"{topic}\": \"{OPENCV_PASSTHROUGH[str(msg.encoding)]}\"}}' reads it so")
            left_out[topic] = f"{msgtype}: {exc}{hint}"
            continue
        for value in values:
            key, part = topic, value.part
            if value.kind == "string":
                if msgtype == STRING and LANGUAGE_TOPIC.search(topic) and language is None:
                    language = topic
                continue
            if value.kind in ("image", "encoded"):
                depth = value.dtype == "uint16"
                spec = FeatureSpec(key, "image", value.dtype, value.shape, declared_shape=value.shape,
                                   codec="raw" if value.kind == "image" else "encoded",
                                   role="depth" if depth else "camera",
                                   name=f"observation/{'depth' if depth else 'image'}_{camera_name(topic)}")
            elif ACTION_TOPIC.search(topic):
                if part not in ("", "position"):
                    continue  # a commanded JointState's position is the action
                spec = FeatureSpec(key, "tensor", "float64", value.shape, names=value.names, role="action",
                                   name="action" if not action_taken else f"action_{ident}")
                action_taken = True
            elif msgtype == JOINT_STATE and part == "position" and not state_taken:
                spec = FeatureSpec(key, "tensor", "float64", value.shape, names=value.names, role="state",
                                   name="observation/state")
                state_taken = True
            else:
                if msgtype == JOINT_STATE:
                    key = f"{topic}#{part}"
                spec = FeatureSpec(key, "tensor", "float64", value.shape, names=value.names, role="observation",
                                   name=f"observation/{ident}" + (f"_{part}" if part else ""))
            out[key] = Feature(spec, topic, msgtype, value)
    specs = unique_names({k: f.spec for k, f in out.items()})
    return {k: Feature(specs[k], f.topic, f.msgtype, f.value) for k, f in out.items()}, language, left_out
