"""The presets shipped with drl: the YAML files in ``drlcli/presets/`` (the repository's
``configs/`` is a link to that folder, so there is one copy).

A preset's leading comment describes it; a comment line ``# measured on ...: <text>`` records
the result measured with it (``drl presets`` and the preset table of docs/results.md show
it). No torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from drlcli.config import Config, load_config

PRESET_FOLDER = Path(__file__).parent / "presets"
MEASURED_PREFIX = "# measured on "


@dataclass(frozen=True)
class Preset:
    name: str
    path: Path

    @property
    def text(self) -> str:
        return self.path.read_text()

    @property
    def summary(self) -> str:
        """The first line of its leading comment."""
        first = self.text.splitlines()[0] if self.text else ""
        return first.removeprefix("#").strip() if first.startswith("#") else ""

    @property
    def measured(self) -> str | None:
        """``deterministic return ...`` from its measured line (``# measured on two CPU
        cores: deterministic return ...``), if any."""
        for line in self.text.splitlines():
            if line.startswith(MEASURED_PREFIX):
                return line.split(":", 1)[1].strip()
        return None

    def config(self) -> Config:
        return load_config(self.path)


def available_presets() -> list[Preset]:
    """Every shipped preset, by name."""
    return [Preset(path.stem, path) for path in sorted(PRESET_FOLDER.glob("*.yaml"))]


def find_preset(name: str) -> Preset | None:
    """The preset called ``name`` (``hopper_ppo`` or ``hopper_ppo.yaml``), or None."""
    stem = name.removesuffix(".yaml")
    return next((preset for preset in available_presets() if preset.name == stem), None)


def preset_names() -> str:
    return ", ".join(preset.name for preset in available_presets())
