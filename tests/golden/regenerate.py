"""Regenerate the byte-exact golden Dockerfiles: `make golden` (python -m tests.golden.regenerate).

One golden per example folder with a lock (`images/<name>/envbuild.lock` -> `<name>.Dockerfile`)
and one per hand-built fixture lock and option set (`fixture-*.Dockerfile`). Review the diff:
every change to a template or to render.py shows up here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from envbuild.render.dockerfile import RenderOptions, render_dockerfile
from tests.golden import fixtures

GOLDEN_DIR = Path(__file__).resolve().parent
REPO = GOLDEN_DIR.parents[1]
IMAGES = REPO / "images"
# A PEM-shaped stand-in for a proxy CA (its bytes never reach the Dockerfile, only its use).
FAKE_CA = b"-----BEGIN CERTIFICATE-----\nZmFrZQ==\n-----END CERTIFICATE-----\n"
FIXTURE_LOCK_TEXT = "# fixture lock text: only its sha256 reaches the Dockerfile\n"


def _fixture_case(make: Callable[[], fixtures.Lock], options: RenderOptions) -> Callable[[], str]:
    return lambda: render_dockerfile(make(), options=options, lock_text=FIXTURE_LOCK_TEXT)


def _example_case(image_dir: Path) -> Callable[[], str]:
    def render() -> str:
        from envbuild.lock.format import loads

        text = (image_dir / "envbuild.lock").read_text(encoding="utf-8")
        lock = loads(text)
        return render_dockerfile(
            lock, options=RenderOptions(), template_dir=image_dir, lock_text=text
        )

    return render


def example_dirs() -> list[Path]:
    return sorted(p.parent for p in IMAGES.glob("*/envbuild.lock"))


def cases() -> dict[str, Callable[[], str]]:
    """golden file name -> a function that renders it now."""
    out: dict[str, Callable[[], str]] = {}
    for name, make in fixtures.FIXTURES.items():
        out[f"{name}.Dockerfile"] = _fixture_case(make, RenderOptions())
    wheelhouse = GOLDEN_DIR  # any existing folder: only the fixed in-image path is rendered
    proxy = RenderOptions(ca_cert=FAKE_CA, find_links=wheelhouse)
    out["fixture-gpu-proxy.Dockerfile"] = _fixture_case(fixtures.gpu_lock, proxy)
    buildkit = RenderOptions(
        ca_cert=FAKE_CA,
        find_links=wheelhouse,
        index_url="https://mirror.example.com/pypi/simple",
        buildkit=True,
    )
    out["fixture-gpu-buildkit.Dockerfile"] = _fixture_case(fixtures.gpu_lock, buildkit)
    out["fixture-devel-buildkit.Dockerfile"] = _fixture_case(fixtures.devel_lock, buildkit)
    # A lock that pins its installer (uv): pip installs only uv, uv installs the requirements.
    out["fixture-cpu-uv-proxy.Dockerfile"] = _fixture_case(fixtures.cpu_uv_lock, proxy)
    out["fixture-cpu-uv-buildkit.Dockerfile"] = _fixture_case(fixtures.cpu_uv_lock, buildkit)
    for image_dir in example_dirs():
        out[f"{image_dir.name}.Dockerfile"] = _example_case(image_dir)
    return out


def main() -> int:
    wanted = cases()
    for name, render in wanted.items():
        path = GOLDEN_DIR / name
        text = render()
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if old != text:
            path.write_text(text, encoding="utf-8")
            print(f"{'updated' if old is not None else 'created'} {path.relative_to(REPO)}")
    for stale in sorted(GOLDEN_DIR.glob("*.Dockerfile")):
        if stale.name not in wanted:
            stale.unlink()
            print(f"removed {stale.relative_to(REPO)} (no example or fixture renders it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
