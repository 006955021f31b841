"""Apache Avro's Java implementation, run beside the tests as a conformance peer.

The jar and its few dependencies are the ones PySpark ships in its `jars/` folder, so nothing
extra is downloaded. `AvroJava` compiles `conformance/AvroConformance.java` once and keeps one
JVM answering requests line by line for the whole test session.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

CONFORMANCE_SOURCE = Path(__file__).resolve().parents[1] / "conformance" / "AvroConformance.java"
JAR_PREFIXES = (
    "avro-1.",
    "jackson-core-",
    "jackson-databind-",
    "jackson-annotations-",
    "slf4j-api-",
    "commons-compress-",
)


class JavaAvroError(RuntimeError):
    """Avro Java refused a request; the message is its exception."""


def avro_classpath() -> list[Path] | str:
    """The jars Avro Java needs, from PySpark's `jars/`, or why they cannot be had."""
    try:
        import pyspark
    except ImportError:
        return "pyspark is not installed (it ships avro-1.12.jar)"
    jars = Path(pyspark.__file__).parent / "jars"
    found = []
    for prefix in JAR_PREFIXES:
        matches = sorted(jars.glob(f"{prefix}*.jar"))
        if not matches:
            return f"no {prefix}*.jar in {jars}"
        found.append(matches[-1])
    return found


def missing_java() -> str | None:
    """Why Avro Java cannot run here, or None."""
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH (Java 17 is needed)"
    classpath = avro_classpath()
    return classpath if isinstance(classpath, str) else None


class AvroJava:
    """One JVM running the conformance harness over the `.avsc` files in `schema_dir`."""

    def __init__(self, schema_dir: Path, build_dir: Path) -> None:
        classpath = avro_classpath()
        assert not isinstance(classpath, str), classpath
        cp = ":".join(str(jar) for jar in classpath)
        subprocess.run(
            ["javac", "-d", str(build_dir), "-cp", cp, str(CONFORMANCE_SOURCE)],
            check=True,
            capture_output=True,
        )
        self.process = subprocess.Popen(
            ["java", "-cp", f"{cp}:{build_dir}", "AvroConformance", str(schema_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            encoding="utf-8",
        )
        ready = self.process.stdout.readline().strip()
        if ready != "READY":
            raise JavaAvroError(f"the Avro Java harness did not start: {ready!r}")

    def _ask(self, *parts: str) -> str:
        self.process.stdin.write("\t".join(parts) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline().rstrip("\n")
        status, _, body = answer.partition("\t")
        if status != "OK":
            raise JavaAvroError(body or f"no answer (exit {self.process.poll()})")
        return body

    def fingerprint(self, full_name: str) -> int:
        """`SchemaNormalization.parsingFingerprint64` of the named schema."""
        return int(self._ask("FP", full_name), 16)

    def decode(self, full_name: str, data: bytes) -> str:
        """`BinaryMessageDecoder` reads single-object bytes; the record comes back as Avro JSON."""
        return self._ask("DECODE", full_name, data.hex())

    def encode(self, full_name: str, avro_json: str) -> bytes:
        """`BinaryMessageEncoder` writes the record given as Avro JSON."""
        return bytes.fromhex(self._ask("ENCODE", full_name, avro_json))

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


def to_avro_json(schema: object, value: object) -> str:
    """`value` (a model dump) in Avro's JSON encoding for `schema` (fastavro-parsed), on one
    line. fastavro's own `json_writer` fails on a map with an empty-string key, a value the
    conformance tests must be able to send."""
    named: dict[str, object] = {}

    def encode(node: object, item: object) -> object:
        if isinstance(node, str):
            if node in named:
                return encode(named[node], item)
            return item.decode("latin-1") if node == "bytes" else item
        if isinstance(node, list):
            if item is None:
                return None
            (branch,) = [member for member in node if member != "null"]
            return {_branch_name(branch): encode(branch, item)}
        kind = node["type"]
        if kind in ("record", "enum"):
            named[node["name"]] = node
        if kind == "record":
            return {f["name"]: encode(f["type"], item[f["name"]]) for f in node["fields"]}
        if kind == "array":
            return [encode(node["items"], element) for element in item]
        if kind == "map":
            return {key: encode(node["values"], element) for key, element in item.items()}
        if kind == "enum":
            return str(item)
        return encode(kind, item)

    return json.dumps(encode(schema, value), separators=(",", ":"))


def _branch_name(branch: object) -> str:
    """The name Avro JSON tags a union branch with: a named type's full name, else its type."""
    if isinstance(branch, str):
        return branch
    return branch["name"] if branch["type"] in ("record", "enum", "fixed") else branch["type"]
