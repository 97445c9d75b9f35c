"""Settings resolution: flag, then MYLM_*, then OPENAI_*, then the config file, then defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from mylm.config import DEFAULT_BASE_URL, config_path, load_settings
from mylm.core.errors import ConfigError


def write_config(text: str) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_config_defaults_point_at_local_ollama() -> None:
    settings = load_settings()
    assert settings.base_url == DEFAULT_BASE_URL == "http://localhost:11434"
    assert settings.max_iterations == 10 and settings.timeout == 120.0
    assert settings.sources["base_url"] == "default" and settings.model is None


def test_config_priority_flag_env_openai_file(monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config('base_url = "http://file/v1"\nmodel = "file-model"\ntimeout = 30\n')
    monkeypatch.setenv("OPENAI_BASE_URL", "http://openai/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    settings = load_settings()
    assert settings.base_url == "http://openai/v1" and settings.sources["base_url"] == "env OPENAI_BASE_URL"
    assert settings.model == "file-model" and settings.sources["model"] == f"config {path}"
    assert settings.timeout == 30.0
    assert settings.api_key_source == "OPENAI_API_KEY"
    monkeypatch.setenv("MYLM_BASE_URL", "http://mylm/v1")
    assert load_settings().base_url == "http://mylm/v1"
    assert load_settings({"base_url": "http://flag/v1"}).base_url == "http://flag/v1"


def test_config_api_key_env_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    write_config('api_key_env = "GROQ_KEY"\n')
    monkeypatch.setenv("GROQ_KEY", "gsk-1")
    settings = load_settings()
    assert settings.api_key == "gsk-1" and settings.api_key_source == "GROQ_KEY"


def test_config_broken_file_names_the_line() -> None:
    path = write_config('model = "a"\nbase_url = \n')
    with pytest.raises(ConfigError, match=rf"{path}.*line 2"):
        load_settings()


def test_config_unknown_key_is_refused_with_the_known_ones() -> None:
    write_config('modle = "x"\n')
    with pytest.raises(ConfigError, match="unknown setting 'modle'.*model"):
        load_settings()


def test_config_bad_values_say_where_they_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MYLM_MAX_ITERATIONS", "zero")
    with pytest.raises(ConfigError, match="max-iterations from env MYLM_MAX_ITERATIONS"):
        load_settings()
    monkeypatch.setenv("MYLM_MAX_ITERATIONS", "0")
    with pytest.raises(ConfigError, match="at least 1"):
        load_settings()


def test_config_file_is_read_on_call_not_import() -> None:
    assert load_settings().model is None
    write_config('model = "late"\n')
    assert load_settings().model == "late"


def test_config_trusted_projects_must_be_absolute_paths() -> None:
    path = write_config('timeout = 5\ntrusted_projects = ["relative/dir"]\n')
    with pytest.raises(ConfigError, match=rf"{path}, line 2: trusted_projects is a list of absolute"):
        load_settings()


def test_config_project_trust_from_the_list_or_the_environment(
    isolated_user_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert load_settings().project_trust is None
    path = write_config(f'trusted_projects = ["{isolated_user_state}"]\n')
    assert load_settings().project_trust == f"trusted_projects in {path}"
    assert load_settings(cwd=isolated_user_state.parent).project_trust is None
    monkeypatch.setenv("MYLM_TRUST_PROJECT", "1")
    assert load_settings(cwd=isolated_user_state.parent).project_trust == "env MYLM_TRUST_PROJECT"
    monkeypatch.setenv("MYLM_TRUST_PROJECT", "maybe")
    with pytest.raises(ConfigError, match="MYLM_TRUST_PROJECT"):
        load_settings()


def test_config_set_project_trust_rewrites_a_multiline_list_and_keeps_the_rest(tmp_path: Path) -> None:
    from mylm.config import set_project_trust

    a, b = tmp_path / "a", tmp_path / "b"
    text = f'# keep me\ntrusted_projects = [\n  "{a}",  # a comment\n]\ntimeout = 5\n\n[tools]\nmemory = false\n'
    real = write_config(text)
    link = tmp_path / "linked.toml"
    link.symlink_to(real)  # a dotfiles-managed config stays a symlink
    assert set_project_trust(b, True, path=link)
    listed = f'trusted_projects = [\n  "{a}",  # a comment\n]'
    assert real.read_text() == text.replace(listed, f'trusted_projects = ["{a}", "{b}"]')
    assert link.is_symlink()
    assert set_project_trust(a, False, path=link) and not set_project_trust(a, False, path=link)
    assert 'trusted_projects = ["' + str(b) + '"]\ntimeout = 5' in real.read_text()
