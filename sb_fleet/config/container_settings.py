"""The config's ``fleet.container`` section: which image, how it reaches the hosts, how it runs. Values are
checked here, at load: no Jinja markers (these strings reach playbooks), image references and sizes in
their documented forms, and registry passwords by reference only."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Runtime = Literal["docker", "podman", "enroot"]


# An image reference: [registry[:port]/]path[:tag][@sha256:hex]. No braces or spaces: these strings are
# emitted into playbooks that Ansible templates.
_IMAGE_RE = re.compile(r"^[a-z0-9][a-z0-9._:/-]*(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")
_SIZE_RE = re.compile(r"^\d+[bkmg]?$", re.I)


def _no_templating(v: str, what: str) -> str:
    if any(t in v for t in ("{{", "{%", "{#", "}}")):
        raise ValueError(f"{what} must not contain Jinja markers ({{{{ or {{%)")
    return v


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class RegistryAuth(_Strict):
    """Registry login. The password is given by reference only: an environment variable of the
    control node, or a file on it; never inline in the config."""

    registry: str
    username: str
    password_env: str | None = None
    password_file: str | None = None

    @field_validator("registry", "username")
    @classmethod
    def _plain(cls, v: str) -> str:
        if not v or any(c.isspace() for c in v):
            raise ValueError("must be non-empty without spaces")
        return _no_templating(v, "registry/username")

    @field_validator("password_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
            raise ValueError("must be an environment variable name")
        return v

    @model_validator(mode="after")
    def _one_source(self) -> RegistryAuth:
        if (self.password_env is None) == (self.password_file is None):
            raise ValueError("give exactly one of password_env or password_file (never the password itself)")
        return self


class ContainerSettings(_Strict):
    """``fleet.container``: which image, how it reaches the hosts, how it runs."""

    image: str
    distribution: Literal["registry", "tarball"] = "registry"
    tarball: str | None = None  # control-node path: `docker/podman save` archive, or an enroot .sqsh
    auth: RegistryAuth | None = None
    pull_throttle: int = Field(8, ge=1, le=10000)  # hosts pulling (or receiving the tarball) at once
    shm_size: str = "16g"
    # auto: from each host's facts (GPUs found at deploy: docker --gpus all, podman's CDI device, enroot's
    # NVIDIA_VISIBLE_DEVICES); all: on every host; none: never.
    gpus: Literal["auto", "all", "none"] = "auto"
    # auto: --device /dev/infiniband where the host's facts show an RDMA device (/sys/class/infiniband).
    infiniband: Literal["auto", "all", "none"] = "auto"
    ipc_host: bool = True
    network_host: bool = True
    extra_run_args: list[str] = Field(default_factory=list)
    global_args: list[str] = Field(default_factory=list)  # before the subcommand, e.g. podman --root
    binary: str | None = None  # the runtime's path on the hosts (default: its name)
    python: str = "python3"  # inside the image
    suite: Literal["workspace", "image"] = "workspace"  # run the deployed suite, or the image's own
    become: bool | None = None  # sudo for runtime commands (default: docker/podman yes, enroot no)
    keep_tarball: bool = False

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        if not _IMAGE_RE.match(v):
            raise ValueError(f"{v!r} is not an image reference like registry.example.com/team/sb-bench:1.2")
        return v

    @field_validator("shm_size")
    @classmethod
    def _shm(cls, v: str) -> str:
        if not _SIZE_RE.match(v):
            raise ValueError("a size like 16g, 512m or 1073741824")
        return v

    @field_validator("extra_run_args", "global_args")
    @classmethod
    def _args(cls, v: list[str]) -> list[str]:
        for a in v:
            _no_templating(a, "container arguments")
        return v

    @field_validator("binary", "python", "tarball")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        return None if v is None else _no_templating(v, "paths")

    @model_validator(mode="after")
    def _consistent(self) -> ContainerSettings:
        if self.distribution == "tarball" and not self.tarball:
            raise ValueError("distribution: tarball needs 'tarball' (the saved image on the control node)")
        if self.distribution == "registry" and self.tarball:
            raise ValueError("'tarball' is only used with distribution: tarball")
        return self
