"""The request (`envbuild.toml`): strict parsing, messages that say what to write instead."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envbuild.core.errors import RequestError
from envbuild.core.models import Indexes, Request, SmokeSettings, Targets
from envbuild.request.parse import (
    SCHEMA,
    canonical_request_json,
    load_request,
    parse_request,
    request_hash,
)

FULL = """\
[image]
name = "train"
python = "3.12"
os = "ubuntu24.04"
flavour = "base"
device = "cuda"
platform = "aarch64"
compile_extensions = true

[framework]
requirement = "torch>=2.7,<2.11"
cuda = "12.8.*"

[packages]
requirements = ["numpy<3", "transformers[torch]>=4.40"]

[targets]
gpus = ["H100", "RTX 5090", "sm_70"]
driver = "570.124.06"
compat = "strict"

[indexes]
index_url = "https://pypi.org/simple"
extra_index_urls = ["https://download.pytorch.org/whl/cu128"]
find_links = ["wheels", "file:///srv/wheels"]

[smoke]
tier = 1
timeout_s = 120
steps = 5
min_shm_mib = 2048
"""


def parse(text: str, name: str = "demo") -> Request:
    return parse_request(text.encode(), path="images/demo/envbuild.toml", default_name=name)


def test_full_request() -> None:
    assert parse(FULL) == Request(
        framework="torch>=2.7,<2.11",
        name="train",
        python="3.12",
        os="ubuntu24.04",
        flavour="base",
        device="cuda",
        cuda="12.8.*",
        packages=("numpy<3", "transformers[torch]>=4.40"),
        targets=Targets(gpus=("H100", "RTX 5090", "sm_70"), driver="570.124.06"),
        indexes=Indexes(
            index_url="https://pypi.org/simple",
            extra_index_urls=("https://download.pytorch.org/whl/cu128",),
            find_links=("wheels", "file:///srv/wheels"),
        ),
        smoke=SmokeSettings(tier=1, timeout_s=120, steps=5, min_shm_mib=2048),
        compat="strict",
        platform="aarch64",
        compile_extensions=True,
    )


def test_minimal_request_takes_defaults_and_folder_name() -> None:
    req = parse('[framework]\nrequirement = "jax"\n', name="jax-train")
    assert req == Request(framework="jax", name="jax-train")


def test_every_schema_key_is_documented() -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "request.md").read_text()
    for table, keys in SCHEMA.items():
        assert f"[{table}]" in doc
        for key in keys:
            assert f"`{key}`" in doc, f"[{table}] {key} is not in docs/request.md"


# (request text, words the message must contain, words the hint must contain)
BAD: list[tuple[str, str, str]] = [
    ('[framework]\nrequirment = "torch"\n', "[framework] requirment: unknown key", "requirement"),
    ('[imag]\nname = "x"\n[framework]\nrequirement = "torch"\n', "unknown table", "[image]"),
    ('framework = "torch"\n', "must be a table", "[framework]"),
    ("[image]\n", "requirement: is missing", "requirement ="),
    ("[framework]\nrequirement = 2\n", "expected a string", "quoted"),
    ('[framework]\nrequirement = "torch>>2"\n', "not a valid requirement", "PEP 508"),
    ('[framework]\nrequirement = "torch @ https://x/t.whl"\n', "direct URL", "range"),
    ('[framework]\nrequirement = "torch"\ncuda = "twelve"\n', "not a version range", "12.8"),
    ('[framework]\nrequirement = "torch"\n[image]\npython = "3"\n', "not a version like", "3.12"),
    ('[framework]\nrequirement = "torch"\n[image]\npython = 3.12\n', "got a float", "quoted"),
    ('[framework]\nrequirement = "torch"\n[image]\nflavour = "slim"\n', "not one of", "plain"),
    ('[framework]\nrequirement = "torch"\n[image]\ndevice = "gpu"\n', "not one of", "cuda"),
    (
        '[framework]\nrequirement = "torch"\n[image]\nplatform = "arm64"\n',
        "Docker's name",
        "aarch64",
    ),
    (
        '[framework]\nrequirement = "torch"\n[image]\nname = "My Image"\n',
        "not a valid image",
        "lower-case",
    ),
    (
        '[framework]\nrequirement = "torch"\n[image]\ncompile_extensions = "yes"\n',
        "true or false",
        "no quotes",
    ),
    (
        '[framework]\nrequirement = "torch"\n[packages]\nrequirements = "numpy"\n',
        "array of strings",
        "[",
    ),
    (
        '[framework]\nrequirement = "torch"\n[packages]\nrequirements = ["numpy<3", 4]\n',
        "expected a string",
        "quoted",
    ),
    (
        '[framework]\nrequirement = "torch"\n[packages]\nrequirements = ["torch<3"]\n',
        "names the framework",
        "[framework]",
    ),
    (
        '[framework]\nrequirement = "torch"\n[packages]\nrequirements = ["numpy", "NumPy<3"]\n',
        "same package",
        "merge",
    ),
    (
        '[framework]\nrequirement = "torch"\n[packages]\nrequirements = ["x @ ftp://h/x.whl"]\n',
        "not an http(s)",
        "https://",
    ),
    (
        '[framework]\nrequirement = "torch"\n[packages]\nrequirements = ["x; python_version<\'3\'"]\n',
        "contains",
        "quotes",
    ),
    (
        '[framework]\nrequirement = "torch"\n[packages]\nrequirements = ["x; sys_platform==linux"]\n',
        "not a valid requirement",
        "PEP 508",
    ),
    (
        '[framework]\nrequirement = "torch"\n[packages]\nrequirements = ["numpy\\n<3"]\n',
        "contains",
        "newlines",
    ),
    (
        '[framework]\nrequirement = "torch"\n[packages]\nrequirements = ["numpy$(id)"]\n',
        "contains",
        "'$'",
    ),
    (
        '[framework]\nrequirement = "torch"\n[packages]\nrequirements = [" numpy"]\n',
        "leading or trailing",
        "'numpy'",
    ),
    (
        '[framework]\nrequirement = "torch"\n[targets]\ndriver = "r570"\n',
        "driver version 'r570' is not a version",
        "570.124.06",
    ),
    ('[framework]\nrequirement = "torch"\n[targets]\ncompat = "loose"\n', "not one of", "minor"),
    ('[framework]\nrequirement = "torch"\n[targets]\ngpus = "H100"\n', "array of strings", "["),
    (
        '[framework]\nrequirement = "torch"\n[indexes]\nindex_url = "ftp://mirror/simple"\n',
        "not an http(s)",
        "https://",
    ),
    (
        '[framework]\nrequirement = "torch"\n[indexes]\nindex_url = "pypi.org/simple"\n',
        "not a URL",
        "https://",
    ),
    (
        '[framework]\nrequirement = "torch"\n[indexes]\nextra_index_urls = ["s3://b/simple"]\n',
        "not an http(s)",
        "https://",
    ),
    (
        '[framework]\nrequirement = "torch"\n[indexes]\nfind_links = ["git+https://h/r"]\n',
        "not an http(s)",
        "file://",
    ),
    ('[framework]\nrequirement = "torch"\n[smoke]\ntier = 3\n', "out of range", "1 to 2"),
    (
        '[framework]\nrequirement = "torch"\n[smoke]\ntier = true\n',
        "expected an integer",
        "no quotes",
    ),
    (
        '[framework]\nrequirement = "torch"\n[smoke]\nsteps = "30"\n',
        "expected an integer",
        "no quotes",
    ),
    ('[framework]\nrequirement = "torch"\n[smoke]\ntimeout = 30\n', "unknown key", "timeout_s"),
    (
        '[framework]\nrequirement = "torch"\n[image]\ndevice = "cpu"\nflavour = "runtime"\n',
        "nvidia/cuda image",
        'flavour = "cpu"',
    ),
    (
        '[framework]\nrequirement = "torch"\n[image]\ndevice = "cpu"\n[targets]\ngpus = ["H100"]\n',
        "GPUs are listed",
        "remove",
    ),
    (
        '[framework]\nrequirement = "torch"\n[image]\ndevice = "cpu"\n[targets]\ndriver = "570.124.06"\n',
        "no driver",
        "remove",
    ),
    (
        '[framework]\nrequirement = "torch"\ncuda = "12.8"\n[image]\ndevice = "cpu"\n',
        "CUDA range",
        "remove",
    ),
    (
        '[framework]\nrequirement = "torch"\n[image]\nflavour = "cpu"\n',
        "CPU-only",
        'device = "cpu"',
    ),
    (
        '[framework]\nrequirement = "torch"\n[image]\ndevice = "cpu"\ncompile_extensions = true\n',
        "needs device",
        "false",
    ),
    ('[framework\nrequirement = "torch"\n', "not valid TOML", "docs/request.md"),
    (
        '[framework]\nrequirement = "torch"\nrequirement = "jax"\n',
        "not valid TOML",
        "docs/request.md",
    ),
]


@pytest.mark.parametrize(("text", "message", "hint"), BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_request(text: str, message: str, hint: str) -> None:
    with pytest.raises(RequestError) as err:
        parse(text)
    assert err.value.exit_code == 2
    assert message in err.value.message
    assert err.value.message.startswith("images/demo/envbuild.toml")
    assert hint in err.value.hint


def test_non_utf8_names_the_byte() -> None:
    data = b'[framework]\nrequirement = "torch\xff"\n'
    with pytest.raises(RequestError) as err:
        parse_request(data, path="f.toml")
    offset = data.index(b"\xff")
    assert f"f.toml: line 2, byte {offset} is not UTF-8" in err.value.message
    assert "UTF-8" in err.value.hint


def test_garbage_bytes() -> None:
    with pytest.raises(RequestError) as err:
        parse_request(bytes(range(256)), path="f.toml")
    assert err.value.exit_code == 2


def test_utf8_bom_is_accepted() -> None:
    req = parse_request(
        b'\xef\xbb\xbf[framework]\nrequirement = "torch"\n', path="f", default_name="a"
    )
    assert req.framework == "torch"


def test_name_needed_when_folder_name_is_not_an_image_name(tmp_path: Path) -> None:
    d = tmp_path / "My Image"
    d.mkdir()
    (d / "envbuild.toml").write_text('[framework]\nrequirement = "torch"\n')
    with pytest.raises(RequestError, match="not a valid image name"):
        load_request(d)
    (d / "envbuild.toml").write_text('[image]\nname = "mine"\n[framework]\nrequirement = "torch"\n')
    assert load_request(d).name == "mine"


def test_missing_folder_and_file(tmp_path: Path) -> None:
    with pytest.raises(RequestError, match="no such image folder"):
        load_request(tmp_path / "nope")
    with pytest.raises(RequestError) as err:
        load_request(tmp_path)
    assert "no request file" in err.value.message
    assert "docs/request.md" in err.value.hint


@pytest.mark.parametrize(
    ("files", "expect"),
    [
        ({}, '[framework] requirement = "torch"'),
        ({"train.py": "print()"}, '[framework] requirement = "torch" and [project] path = "."'),
        (
            {"requirements.txt": "torchvision\ntorch>=2.6\n"},
            '[framework] requirement = "torch", [packages] files = ["requirements.txt"] and '
            '[project] path = "."',
        ),
        (
            {
                "pyproject.toml": '[project]\ndependencies = ["flax", "jax[cuda12]>=0.4"]\n',
                "requirements.txt": "tensorflow\n",
            },
            '[framework] requirement = "jax", [packages] files = ["pyproject.toml"] and '
            '[project] path = "."',
        ),
        (
            {
                "setup.py": "setup(install_requires=['tensorflow==2.20.*'])",
                "pyproject.toml": '[project]\nname = "x"\ndependencies = ["torch"]\n',
                "uv.lock": "x",
            },
            '[framework] requirement = "torch", [packages] files = ["uv.lock"] and '
            '[project] path = "."',
        ),
        ({"requirements.txt": "pytorch-lightning\ntorchvision\n"}, 'requirement = "torch"'),
        # A pyproject.toml of tool settings only (ruff, black) has no dependencies to read.
        (
            {"pyproject.toml": "[tool.ruff]\nline-length = 100\n", "requirements.txt": "jax\n"},
            '[framework] requirement = "jax", [packages] files = ["requirements.txt"]',
        ),
        # Nor a [project] without dependencies (metadata only, the dependencies elsewhere).
        (
            {
                "pyproject.toml": '[project]\nname = "x"\nversion = "1"\n',
                "requirements.txt": "jax\neinops\n",
            },
            '[framework] requirement = "jax", [packages] files = ["requirements.txt"]',
        ),
        # Nor a uv.lock without a project beside it; a setup.py is next.
        ({"uv.lock": "x", "setup.py": "setup()"}, '[packages] files = ["setup.py"]'),
        # Dynamic dependencies: read where the backend reads them from a file, else not.
        (
            {
                "pyproject.toml": '[project]\nname = "x"\ndynamic = ["dependencies"]\n'
                "[tool.setuptools.dynamic]\n"
                'dependencies = {file = ["requirements.txt"]}\n',
                "requirements.txt": "tensorflow==2.20.*\n",
            },
            # The framework is found in the file the backend reads.
            '[framework] requirement = "tensorflow", [packages] files = ["pyproject.toml"]',
        ),
        (
            {
                "pyproject.toml": '[project]\nname = "x"\ndynamic = ["dependencies"]\n',
                "requirements-gpu.txt": "tensorflow[and-cuda]\n",
            },
            '[framework] requirement = "tensorflow", [packages] files = ["requirements-gpu.txt"]',
        ),
        # Requirements by another name: runtime ones, the preferred stem first.
        (
            {"requirements/dev.txt": "torch\n", "requirements/base.txt": "torch\n"},
            '[packages] files = ["requirements/base.txt"]',
        ),
        (
            {"requirements-dev.txt": "pytest\n", "requirements-scipy.txt": "scipy\n"},
            '[packages] files = ["requirements-scipy.txt"]',
        ),
        # Poetry before 2 ([tool.poetry], no [project]): not read, and the export said.
        (
            {
                "pyproject.toml": '[tool.poetry]\nname = "x"\n'
                '[tool.poetry.dependencies]\ntorch = "^2.6"\n',
                "train.py": "",
            },
            "poetry export --format requirements.txt --output requirements.txt",
        ),
        # conda's environment.yml: not read, and said so, with what the code imports (its
        # conda packages are not read either).
        (
            {
                "environment.yml": "dependencies:\n  - pytorch\n  - numpy\n",
                "train.py": "import numpy\nimport torchvision\n",
            },
            "environment.yml is conda's and is not read: list its pip packages in a "
            "requirements.txt and name it in [packages] files; its code imports numpy, "
            "torchvision)",
        ),
        # A GPU extra that names the framework's CUDA build (levanter): named with that build,
        # so the stack's CUDA series is the extra's.
        (
            {
                "pyproject.toml": '[project]\nname = "x"\ndependencies = ["jax>=0.6", "optax"]\n'
                "[project.optional-dependencies]\n"
                'gpu = ["jax[cuda12]>=0.6.2"]\ntpu = ["jax[tpu]"]\ndocs = ["nvidia-sphinx-theme"]\n',
            },
            '[framework] requirement = "jax[cuda12]", [packages] files = ["pyproject.toml"], '
            '[packages] extras = ["gpu"] and [project] path = "."',
        ),
        # A line from version control cannot be locked with hashes (maxtext): said to replace.
        (
            {"requirements.txt": "jax\nmlperf-logging@git+https://github.com/mlperf/logging.git\n"},
            "(then replace 'mlperf-logging@git+https://github.com/mlperf/logging.git' in "
            "requirements.txt by released versions or wheel URLs: only what has hashes is locked)",
        ),
        # ... only in what the request reads: an extra is not, and the file named is the one
        # the line is in (a uv.lock's project keeps its dependencies in pyproject.toml).
        (
            {
                "pyproject.toml": '[project]\nname = "x"\n'
                'dependencies = ["torch", "logs @ git+https://example.org/logs.git"]\n'
                '[project.optional-dependencies]\ndev = ["tool @ git+https://example.org/t.git"]\n',
                "uv.lock": "version = 1\n",
            },
            "(then replace 'logs @ git+https://example.org/logs.git' in pyproject.toml by",
        ),
        # An extra that is no CUDA build of the framework is not carried into the request.
        (
            {
                "pyproject.toml": '[project]\nname = "x"\ndependencies = ["jax"]\n'
                '[project.optional-dependencies]\ngpu = ["jax[cuda12_pip]"]\n',
            },
            '[framework] requirement = "jax", [packages] files = ["pyproject.toml"], '
            '[packages] extras = ["gpu"]',
        ),
        # A src layout's own package is not an import to list.
        (
            {
                "src/mypkg/__init__.py": "",
                "src/mypkg/train.py": "from mypkg import util\nimport einops\n",
                "environment.yml": "dependencies: []\n",
            },
            "its code imports einops)",
        ),
        # A setup.py that declares nothing while its code imports packages (segment-anything).
        (
            {
                "setup.py": "setup(name='sam', install_requires=[])\n",
                "sam/model.py": "import numpy\nimport torchvision\nfrom sam import x\n",
            },
            '[packages] files = ["setup.py"] and [project] path = "." (setup.py names no '
            "dependencies, and its code imports numpy, torchvision: list their packages",
        ),
        # Imports in the project's own packages count (nanoVLM's models/), its venv does not.
        (
            {
                "train.py": "from models.net import Net\nimport wandb\n",
                "models/net.py": "import einops\nfrom transformers import AutoModel\n",
                ".venv/pyvenv.cfg": "home = /usr\n",
                ".venv/lib/x.py": "import leaked_from_venv\n",
                "env/pyvenv.cfg": "",
                "env/y.py": "import other_venv\n",
            },
            "its code imports einops, transformers, wandb: list their packages",
        ),
        # A setup.py that hands setup() a top-level list by name (llm-foundry) is read...
        (
            {
                "setup.py": "reqs = ['torch>=2.7']\nx = {}\nx['a'] = []\n"
                "setup(install_requires=reqs, extras_require=x)\n"
            },
            '[packages] files = ["setup.py"]',
        ),
        # ... one that computes it is not named, and the hint says what to write instead.
        (
            {"setup.py": "setup(install_requires=open('r.txt').read().split())\n"},
            '[framework] requirement = "torch" and [project] path = "." (setup.py computes its '
            "install_requires when it runs",
        ),
        # No dependency file at all (karpathy/nanoGPT): the code's own imports are named.
        (
            {
                "train.py": "import os, numpy as np\nfrom tiktoken import get_encoding\n"
                "import torch.nn\nfrom model import GPT\nfrom . import rel\n",
                "model.py": "import math\nimport inspect\nfrom transformers import X\n",
                "broken.py": "def (:\n",
            },
            "(no dependency file found, and its code imports numpy, tiktoken, transformers: "
            "list their packages in [packages] requirements)",
        ),
    ],
)
def test_a_missing_request_names_the_smallest_one_for_the_folder(
    tmp_path: Path, files: dict[str, str], expect: str
) -> None:
    """The hint is a request that locks as it is (pytorch/examples mnist/ and karpathy/minGPT
    locked with theirs on 2026-12-03): the folder's first dependency file, the framework it
    names, the folder as the project."""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    with pytest.raises(RequestError) as err:
        load_request(tmp_path)
    assert expect in err.value.hint


def test_the_imports_named_are_the_folders_own_and_at_most_twelve(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.py"
    outside.write_text("import secretlib\n")
    project = tmp_path / "proj"
    project.mkdir()
    (project / "link.py").symlink_to(outside)  # not the folder's own file: not read
    (project / "train.py").write_text("".join(f"import mod{i:02d}\n" for i in range(15)))
    with pytest.raises(RequestError) as err:
        load_request(project)
    names = ", ".join(f"mod{i:02d}" for i in range(12))
    assert f"its code imports {names} and 3 more: list" in err.value.hint
    assert "secretlib" not in err.value.hint


def test_a_fifo_named_like_a_dependency_file_is_not_read_for_the_hint(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "requirements.txt")
    with pytest.raises(RequestError) as err:
        load_request(tmp_path)
    assert "files" not in err.value.hint  # not a file: neither read (no hang) nor suggested


def test_canonical_json_leaves_out_defaults() -> None:
    req = parse('[framework]\nrequirement = "torch"\n[smoke]\ntier = 1\n')
    assert canonical_request_json(req) == '{"framework":"torch","name":"demo","smoke":{"tier":1}}'


def test_request_hash_ignores_formatting_and_order() -> None:
    a = parse(
        '[framework]\nrequirement = "torch"\n[targets]\ngpus = ["H100"]\ndriver = "570.124.06"\n'
    )
    b = parse(
        '[targets]\ndriver = "570.124.06"  # oldest host\ngpus = [ "H100" ]\n\n[framework]\nrequirement="torch"\n'
    )
    assert request_hash(a) == request_hash(b)
    c = parse(
        '[framework]\nrequirement = "torch"\n[targets]\ngpus = ["H200"]\ndriver = "570.124.06"\n'
    )
    assert request_hash(a) != request_hash(c)
