"""Grammar-constrained requests on the wire: each server's field names, refusals learned once, `grammar` insisting."""

from __future__ import annotations

import dataclasses

import pytest

from mylm.constrain import TRIGGER, ToolSpec, compile_protocol
from mylm.core.errors import UnsupportedConstraintError
from mylm.llm import Constraint, LLMRequest
from mylm.providers import Endpoint, create_llm
from tests.providers.helpers import FAST_RETRY, collect, request
from tests.providers.native_servers import LlamaCppServer, OllamaServer
from tests.providers.servers import HTTPError, OpenAIServer

GRAMMAR = compile_protocol([ToolSpec("read_file", {"type": "object", "properties": {"path": {"type": "string"}},
                                                   "required": ["path"]})])


def constrained(required: bool = False) -> LLMRequest:
    return dataclasses.replace(
        request(), constraint=Constraint(GRAMMAR.turn, GRAMMAR.call, TRIGGER, required=required)
    )


def test_llama_server_gets_a_lazy_grammar_triggered_by_the_call() -> None:
    with LlamaCppServer(["ok"]) as server:
        collect(create_llm(Endpoint(provider="llamacpp", base_url=server.root_url)).stream(constrained()))
        body = server.requests[-1].body
    assert body["grammar"] == GRAMMAR.call and body["grammar_lazy"] is True
    assert body["grammar_triggers"] == [{"type": 1, "value": "<tool_code>"}]


def test_llama_server_gets_the_whole_turn_grammar_when_the_user_insists() -> None:
    with LlamaCppServer(["ok"]) as server:
        collect(create_llm(Endpoint(provider="llamacpp", base_url=server.root_url)).stream(constrained(True)))
        body = server.requests[-1].body
    assert body["grammar"] == GRAMMAR.turn and "grammar_lazy" not in body


def test_llama_server_without_lazy_grammars_is_sent_the_plain_one_from_then_on() -> None:
    refusal = {"error": {"code": 400, "message": "Unknown field: grammar_triggers", "type": "invalid_request_error"}}
    with LlamaCppServer([HTTPError(400, refusal), "one", "two"]) as server:
        llm = create_llm(Endpoint(provider="llamacpp", base_url=server.root_url))
        collect(llm.stream(constrained()))
        collect(llm.stream(constrained()))
        bodies = [r.body for r in server.requests if r.path == "/completion"]
    assert ["grammar_lazy" in b for b in bodies] == [True, False, False]
    assert bodies[-1]["grammar"] == GRAMMAR.turn


def test_openai_compatible_servers_get_llama_cpp_and_vllm_fields(openai_server: OpenAIServer) -> None:
    openai_server.script(["ok"])
    collect(create_llm(Endpoint(provider="openai", base_url=openai_server.base_url, model="m")).stream(constrained()))
    body = openai_server.requests[0].body
    assert body["grammar"] == GRAMMAR.turn
    assert body["structured_outputs"] == {"grammar": GRAMMAR.turn}


def test_a_refused_grammar_is_dropped_and_remembered_in_auto_mode(openai_server: OpenAIServer) -> None:
    refusal = {"error": {"message": "Unrecognized request argument supplied: grammar", "type": "invalid_request_error",
                         "param": None, "code": None}}
    openai_server.script([HTTPError(400, refusal), "first", "second"])
    llm = create_llm(Endpoint(provider="openai", base_url=openai_server.base_url, model="m"))
    assert collect(llm.stream(constrained()))[0] == "first"
    assert collect(llm.stream(constrained()))[0] == "second"
    assert ["grammar" in r.body for r in openai_server.requests] == [True, False, False]


def test_a_refused_structured_outputs_field_keeps_the_grammar(openai_server: OpenAIServer) -> None:
    refusal = {"detail": [{"type": "extra_forbidden", "loc": ["body", "structured_outputs"],
                           "msg": "Extra inputs are not permitted: structured_outputs"}]}
    openai_server.script([HTTPError(422, refusal), "ok"])
    llm = create_llm(Endpoint(provider="openai", base_url=openai_server.base_url, model="m"))
    collect(llm.stream(constrained()))
    second = openai_server.requests[1].body
    assert second["grammar"] == GRAMMAR.turn and "structured_outputs" not in second


def test_insisting_on_a_grammar_a_server_refused_is_one_clear_error(openai_server: OpenAIServer) -> None:
    refusal = {"error": {"message": "Unrecognized request argument supplied: grammar", "type": "invalid_request_error"}}
    openai_server.script([HTTPError(400, refusal)])
    llm = create_llm(Endpoint(provider="openai", base_url=openai_server.base_url, model="m"))
    llm.retry = FAST_RETRY  # type: ignore[attr-defined]
    with pytest.raises(UnsupportedConstraintError, match="refused one") as caught:
        collect(llm.stream(constrained(True)))
    assert caught.value.exit_code == 2 and "\n" not in str(caught.value)


def test_ollama_has_no_grammar_field_auto_sends_none_and_grammar_fails() -> None:
    with OllamaServer(["ok"]) as server:
        llm = create_llm(Endpoint(provider="ollama", base_url=server.base_url, model="m"))
        collect(llm.stream(constrained()))
        assert "grammar" not in server.requests[-1].body and "format" not in server.requests[-1].body
        with pytest.raises(UnsupportedConstraintError, match="ollama API has no grammar field"):
            collect(llm.stream(constrained(True)))


def test_openai_itself_is_known_to_take_no_grammar() -> None:
    llm = create_llm(Endpoint(provider="openai", model="gpt-4o"))
    assert llm.grammar_fields(constrained()) == {}  # type: ignore[attr-defined]
    with pytest.raises(UnsupportedConstraintError):
        llm.grammar_fields(constrained(True))  # type: ignore[attr-defined]


@pytest.mark.parametrize("provider", ["openai", "llamacpp"])
def test_a_grammar_encoded_once_goes_out_as_the_bytes_encoding_the_body_whole_gives(provider: str) -> None:
    # The grammar's JSON is kept per grammar (`encoded_grammar`); the body must still be the very bytes
    # `json.dumps` makes of it, for any text a grammar holds: quotes, backslashes, line breaks, non-ASCII.
    import json

    from mylm.providers.engine import encoded_grammar

    odd = 'root ::= "\\"quoted\\"" [\\n\\t] "é→" "\\\\"\nline ::= "two"\n'
    llm = create_llm(Endpoint(provider=provider, base_url="http://127.0.0.1:9/v1", model="m"))
    for insisted in (False, True):
        call = llm.build_call(dataclasses.replace(  # type: ignore[attr-defined]
            request(), constraint=Constraint(odd, odd + "call ::= x\n", TRIGGER, required=insisted)))
        body = json.loads(call.body)
        assert call.body == json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        assert body["grammar"] in (odd, odd + "call ::= x\n")
        if provider == "openai":
            assert body["structured_outputs"] == {"grammar": odd}
    assert encoded_grammar(odd) is encoded_grammar(odd)
