"""Several upstreams behind one `mylm serve`, chosen by the request's `model` (`--upstream`): each model's
requests reach its own upstream, every model list names them all, and an unknown model is each API's own 404."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from mylm.prompts import PromptLoader
from mylm.providers import Endpoint, create_llm
from mylm.serve.app import ServeConfig, create_app
from mylm.serve.core import Core, CoreSettings
from mylm.serve.server import Background
from tests.providers.servers import OpenAIServer
from tests.serve.support import WEATHER, call, openai_client, tracked

ollama = pytest.importorskip("ollama")

QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


def core(server: OpenAIServer, model: str) -> Core:
    loader = PromptLoader.default()
    endpoint = Endpoint(provider="openai", base_url=server.base_url, model=model, api_key="k", max_tokens=256)
    return Core(create_llm(endpoint, prompts=loader), loader, CoreSettings(constrain="off", timeout=30))


@contextlib.contextmanager
def two() -> Iterator[tuple[OpenAIServer, OpenAIServer, str]]:
    """Two scripted upstreams served as `coder` (upstream model `qwen-coder`) and `small` (`qwen-small`)."""
    with OpenAIServer() as first, OpenAIServer() as second:
        cores = {"coder": core(first, "qwen-coder"), "small": core(second, "qwen-small")}
        app = create_app(cores["coder"], ServeConfig(model="coder"), upstreams=cores)
        with Background(app) as url:
            yield first, second, url


def test_each_model_reaches_its_own_upstream_on_every_api() -> None:
    with two() as (first, second, url):
        first.script([call("get_weather", '{"city": "Paris"}')])
        second.script(["Small answer.", "Small again.", "And again."])
        reply = openai_client(url).chat.completions.create(model="coder", messages=QUESTION, tools=[WEATHER])
        assert reply.choices[0].message.tool_calls[0].function.name == "get_weather"  # type: ignore[index]
        assert reply.model == "coder" and first.requests[-1].body["model"] == "qwen-coder"
        assert openai_client(url).chat.completions.create(model="small", messages=QUESTION).choices[0] \
            .message.content == "Small answer."
        api = tracked(anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=30))
        said = api.messages.create(model="small", max_tokens=64, messages=QUESTION)  # type: ignore[arg-type]
        assert said.content[0].text == "Small again."  # type: ignore[union-attr]
        chat = tracked(ollama.Client(host=url, timeout=30)).chat(model="small", messages=QUESTION, stream=False)
        assert chat.message.content == "And again."
        assert [r.body["model"] for r in second.requests] == ["qwen-small"] * 3 and len(first.requests) == 1


def test_every_model_list_names_them_all() -> None:
    with two() as (_, _, url):
        assert [m.id for m in openai_client(url).models.list()] == ["coder", "small"]
        api = tracked(anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=30))
        assert [m.id for m in api.models.list()] == ["coder", "small"]
        assert [m.model for m in tracked(ollama.Client(host=url, timeout=30)).list().models] == ["coder", "small"]
        assert openai_client(url).models.retrieve("small").id == "small"


def test_an_unknown_model_is_each_apis_own_404_naming_the_served_ones() -> None:
    with two() as (first, second, url):
        with pytest.raises(openai.NotFoundError) as refused:
            openai_client(url).chat.completions.create(model="gpt-4o", messages=QUESTION)
        error = refused.value.body
        assert isinstance(error, dict) and error["code"] == "model_not_found" and error["param"] == "model"
        assert "'gpt-4o'" in error["message"] and "'coder', 'small'" in error["message"]
        with pytest.raises(openai.NotFoundError):
            openai_client(url).responses.create(model="gpt-4o", input="hi", stream=True)
        api = tracked(anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=30))
        with pytest.raises(anthropic.NotFoundError) as missing:
            api.messages.create(model="claude-x", max_tokens=64, messages=QUESTION)  # type: ignore[arg-type]
        assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
        with pytest.raises(ollama.ResponseError) as absent:
            list(tracked(ollama.Client(host=url, timeout=30)).chat(model="llama3", messages=QUESTION, stream=True))
        assert absent.value.status_code == 404 and "'coder', 'small'" in absent.value.error
        assert first.requests == [] and second.requests == []  # nothing went upstream


def test_one_upstream_still_serves_any_model_name(upstream: OpenAIServer, served: str) -> None:
    upstream.script(["Hello."])
    reply = openai_client(served).chat.completions.create(model="whatever-the-client-says", messages=QUESTION)
    assert reply.choices[0].message.content == "Hello." and reply.model == "whatever-the-client-says"


@pytest.mark.slow
def test_the_cli_serves_a_profile_and_a_url_by_name(subprocess_env: dict[str, str], tmp_path: Path) -> None:
    with OpenAIServer() as first, OpenAIServer() as second:
        config = tmp_path / "config.toml"
        config.write_text(f'[profiles.qwen15]\nbase_url = "{first.base_url}"\nmodel = "qwen2.5-coder-1.5b"\n'
                          'provider = "openai"\n', encoding="utf-8")
        env = {**subprocess_env, "MYLM_CONFIG": str(config)}
        process = subprocess.Popen(
            [sys.executable, "-m", "mylm", "serve", "--port", "0", "--constrain", "off", "--upstream",
             "coder=qwen15", "--upstream", f"small={second.base_url}"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert process.stderr is not None
            banner = process.stderr.readline()
            found = re.search(r"(http://\S+)/v1", banner)
            assert found is not None, banner + process.stderr.read()
            assert "coder:" in banner and "small:" in banner
            url = found.group(1)
            first.script(["From the profile."])
            second.script(["From the URL."])
            api = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
            with api:
                assert [m.id for m in api.models.list()] == ["coder", "small"]
                for model, said in (("coder", "From the profile."), ("small", "From the URL.")):
                    reply = api.chat.completions.create(model=model, messages=QUESTION)
                    assert reply.choices[0].message.content == said
            # The profile's model, and the name for a URL (the GETs are the context window's measuring).
            assert [r.body["model"] for r in first.requests if r.method == "POST"] == ["qwen2.5-coder-1.5b"]
            assert [r.body["model"] for r in second.requests if r.method == "POST"] == ["small"]
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=60)
            finally:
                if process.poll() is None:
                    process.kill()
                process.communicate()


@pytest.mark.slow
@pytest.mark.parametrize("entry, said", [
    ("coder=nowhere", "no [profiles.nowhere] table"),
    ("=http://127.0.0.1:9/v1", "expected NAME=PROFILE"),
])
def test_a_bad_upstream_is_one_line(subprocess_env: dict[str, str], tmp_path: Path, entry: str, said: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text("", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "mylm", "serve", "--port", "0", "--upstream", entry],
                          env={**subprocess_env, "MYLM_CONFIG": str(config)}, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr
    assert json.dumps(done.stderr).count("\\n") == 1  # one line
