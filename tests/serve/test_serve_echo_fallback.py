"""Out of corrections, the reply that goes out is never mylm's own correction copied back by the model: OpenCode's
1.5B, told its working ran to the limit, answered that message three times, and OpenCode printed it as the
answer. The last reply in the model's own words goes out instead, or nothing."""

from __future__ import annotations

import re

import openai

from tests.providers.servers import Completion, OpenAIServer, RecordedRequest, Reply
from tests.serve.support import WEATHER, call, serving


class Echoing(OpenAIServer):
    """A model that first calls a tool that does not exist, then copies back the correction it was sent."""

    def _record(self, request: RecordedRequest) -> Reply | None:
        with self._lock:
            if self.is_generation(request.method, request.path):
                messages = (request.body or {}).get("messages") or []
                # The words of the first correction, again and again, without the tags around them (a copy in
                # tags is an invented observation, a problem of its own).
                first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), None)
                told = re.sub(r"</?observation>", "", str(messages[first + 1].get("content"))).strip() if (
                    first is not None and first + 1 < len(messages)) else ""
                self._script = [Completion(told or call("frobnicate", '{"x": 1}', "Let me frobnicate."))]
            return super()._record(request)


def test_a_correction_copied_back_to_the_last_attempt_never_reaches_the_client() -> None:
    with Echoing() as upstream, serving(upstream.base_url) as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused") as api:
        reply = api.chat.completions.create(model="m", tools=[WEATHER], messages=[
            {"role": "user", "content": "How warm is it in Paris?"}])
    sent = [r.body for r in upstream.requests if isinstance(r.body, dict) and r.body.get("messages")]
    assert len(sent) == 3  # the call, then two copies of the corrections
    correction = str(sent[1]["messages"][-1]["content"])
    assert "frobnicate" in correction
    message = reply.choices[0].message
    # What the model wrote itself before the call, never the correction's words.
    assert not message.tool_calls and message.content == "Let me frobnicate."
