"""The one fake container engine of the unit tests: `envbuild.engine.protocol.ContainerEngine`
answered from memory, every call recorded in order. Behaviour is set per test through its
fields (or a subclass that overrides one method); engine-marked integration tests drive the
real engines instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envbuild.core.errors import EnvbuildError, UserError
from envbuild.engine.protocol import BuildResult, ProgressFn, RunResult, RunSpec
from envbuild.host.gpu_attach import Attachment


@dataclass
class FakeEngine:
    """Records every call in order; behaviour is set per test.

    `labels`: the labels of every image it is asked about (a tagged image a test names, as
    `validate` reads it); `read_only`: the use case must never build, tag, remove, push or
    save (validate's contract), so those calls fail the test."""

    name: str = "fake"
    nvidia: bool = True
    ping_error: EnvbuildError | None = None
    build_error: EnvbuildError | None = None
    run_result: RunResult | None = None
    run_raises: BaseException | None = None
    calls: list[tuple[str, Any]] = field(default_factory=list)
    images: dict[str, dict[str, str]] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] | None = None
    read_only: bool = False
    platforms: list[str | None] = field(default_factory=list)
    """The `platform` of each build, in order."""
    build_args: list[dict[str, str]] = field(default_factory=list)
    """The `build_args` of each build, in order."""
    _n: int = 0

    @property
    def runs(self) -> list[RunSpec]:
        return [spec for name, spec in self.calls if name == "run"]

    def _writes(self, what: str) -> None:
        if self.read_only:
            raise AssertionError(f"this use case never {what}")

    def _new_id(self) -> str:
        self._n += 1
        return f"sha256:{self._n:064x}"

    def ping(self) -> None:
        self.calls.append(("ping", None))
        if self.ping_error:
            raise self.ping_error

    def build(
        self,
        *,
        context: Mapping[str, bytes],
        labels: Mapping[str, str],
        progress: ProgressFn,
        pull: bool = False,
        platform: str | None = None,
        build_args: Mapping[str, str] | None = None,
    ) -> BuildResult:
        self._writes("builds")
        self.calls.append(("build", dict(labels)))
        self.platforms.append(platform)
        self.build_args.append(dict(build_args or {}))
        progress("Step 1/1 : FROM base")
        if self.build_error:
            raise self.build_error
        image_id = self._new_id()
        self.images[image_id] = dict(labels)
        return BuildResult(image_id=image_id)

    def run(self, spec: RunSpec) -> RunResult:
        self.calls.append(("run", spec))
        if self.run_raises:
            raise self.run_raises
        assert self.run_result is not None
        return self.run_result

    def tag(self, image_id: str, ref: str, *, labels: Mapping[str, str]) -> str:
        self._writes("tags")
        self.calls.append(("tag", (image_id, ref, dict(labels))))
        new = self._new_id()
        self.images[new] = {**self.images[image_id], **labels}
        self.tags[ref] = new
        return new

    def remove_image(self, image_id: str) -> None:
        self._writes("removes images")
        self.calls.append(("remove_image", image_id))
        self.images.pop(image_id, None)

    def image_labels(self, ref: str) -> dict[str, str]:
        if self.labels is not None:
            return dict(self.labels)
        return dict(self.images[self.tags.get(ref, ref)])

    def image_exists(self, ref: str) -> bool:
        return self.labels is not None or self.tags.get(ref, ref) in self.images

    def builder(self) -> str:
        return "classic builder (fake)"

    def image_ids(self, ref: str, *, pull: bool = True) -> tuple[str, str | None]:
        # As the Docker engine: a ref it does not have is a UserError (nothing is pulled here).
        image_id = self.tags.get(ref, ref)
        if image_id not in self.images:
            raise UserError(f"no image {ref} in the engine")
        return image_id, None

    def containers(self, label: str) -> list[str]:
        return []

    def gpu_attach(self, *, want: str = "auto", devices: tuple[str, ...] = ("all",)) -> Attachment:
        self.calls.append(("gpu_attach", want))
        way = ("cdi" if want == "auto" else want) if self.nvidia else "none"
        return Attachment(way, devices, "auto", "fake engine")  # type: ignore[arg-type]

    def push(self, image: str, ref: str, *, progress: ProgressFn) -> str:
        self._writes("pushes")
        self.calls.append(("push", (image, ref)))
        return "sha256:" + "d" * 64

    def save(self, ref: str, dest: Path) -> int:
        self._writes("saves")
        self.calls.append(("save", (ref, dest)))
        return 0

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]


def read_only_engine(
    labels: dict[str, str], stdout: str = "", exit_code: int = 0, nvidia: bool = True
) -> FakeEngine:
    """An engine holding one tagged image with `labels`, whose runs answer `stdout` and
    `exit_code`, and that fails a test which builds, tags, removes, pushes or saves."""
    return FakeEngine(
        labels=labels,
        read_only=True,
        nvidia=nvidia,
        run_result=RunResult(exit_code=exit_code, stdout=stdout, stderr=""),
    )
