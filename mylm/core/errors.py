"""The one rooted error tree of mylm; each error owns its exit code and its one-line message.

    MylmError                       exit 1
    ├── ConfigError                 exit 2   bad flags, environment or config file
    │   ├── UnsupportedConstraintError       --constrain grammar where the endpoint cannot sample under one
    │   ├── TaskFileError                    a line of a `mylm batch` task file is not valid
    │   └── ResultsFileError                 a `mylm batch` results file cannot be read or written
    ├── TemplateError               exit 2   a prompt template is missing, broken or unsafe
    ├── LLMError                    exit 1   anything that went wrong talking to the model endpoint
    │   ├── EndpointUnreachableError         connection refused, DNS, TLS
    │   ├── LLMTimeoutError                  no byte within the read timeout, or the run's deadline passed
    │   ├── StreamError                      a broken stream, or an error object inside a 200 stream
    │   │   └── ConnectionBroke              the connection failed mid-body
    │   └── HTTPStatusError                  the server answered 4xx/5xx (status, server message)
    │       ├── AuthenticationError          401 / 403
    │       ├── ModelNotFoundError           404
    │       ├── ContextOverflowError         the prompt does not fit the model's context
    │       ├── RateLimitError               429 (retryable unless the quota is spent)
    │       └── ServerError                  5xx
    ├── UnusableRepliesError        exit 1   the model gave too many unusable replies in a row
    ├── NoToolsError                exit 1   the model called a tool, but the agent has none at all
    ├── RepeatedCallError           exit 5   the model kept making the same call, to the same result
    ├── ToolError                   exit 1   raised by a tool for an expected failure; becomes an observation
    │   ├── EscapeError                      a path leads outside the workspace
    │   └── LauncherGoneError                the sandbox's command launcher died; the command did not run
    ├── SandboxError                exit 1   the kernel refused to build or apply a command's sandbox
    ├── WorkspaceError              exit 1   a batch task's workspace could not be made
    │   └── WorkspaceRefusedError            a delegated run's workspace is outside the allowed roots
    ├── SessionNotFoundError        exit 1   no saved session has that id
    ├── RequestError                         `mylm serve`: a client's request is malformed (a 4xx in its API's shape)
    ├── WorkersFailed               exit 1   `mylm serve --workers`: workers kept dying, so the server stopped
    ├── DownloadError               exit 1   a model could not be fetched or failed its checksum
    ├── RunTimeoutError             exit 4   the run's wall-clock budget is spent
    └── CancelledError              exit 130 the run was cancelled (Ctrl-C or a cancel token)
"""

from __future__ import annotations


class MylmError(Exception):
    """Base of every error mylm raises on purpose."""

    exit_code: int = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ConfigError(MylmError):
    """Settings from flags, environment or the config file are invalid."""

    exit_code = 2


class UnsupportedConstraintError(ConfigError):
    """`--constrain grammar` against an endpoint that cannot (or refuses to) sample under a grammar."""


class TemplateError(MylmError):
    """A prompt template cannot be found, parsed or rendered."""

    exit_code = 2


class LLMError(MylmError):
    """The model endpoint could not give a usable completion."""

    #: Whether sending the same request again may succeed (connection drops, 429, 5xx).
    retryable: bool = False


class EndpointUnreachableError(LLMError):
    """No connection could be made to the endpoint."""

    retryable = True


class LLMTimeoutError(LLMError):
    """The endpoint went silent for longer than the read timeout, or the run's deadline passed."""


class StreamError(LLMError):
    """The response stream broke off or carried an error object."""

    retryable = True


class ConnectionBroke(StreamError):
    """The connection failed mid-body (a `StreamError`; the engine forgives it once an answer is whole)."""


class HTTPStatusError(LLMError):
    """The endpoint answered with an HTTP error status."""

    def __init__(self, message: str, *, status: int, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class AuthenticationError(HTTPStatusError):
    """The endpoint rejected the API key (401) or the key lacks permission (403)."""


class ModelNotFoundError(HTTPStatusError):
    """The endpoint does not know the requested model or route (404)."""


class ContextOverflowError(HTTPStatusError):
    """The conversation no longer fits the model's context window."""


class RateLimitError(HTTPStatusError):
    """Too many requests (429); retryable unless the account's quota is spent."""

    retryable = True


class ServerError(HTTPStatusError):
    """The endpoint failed with a 5xx status."""

    retryable = True


class ToolError(MylmError):
    """A tool failed in a way it can explain; the message goes back to the model as an error observation."""


class EscapeError(ToolError):
    """A path leads outside the workspace."""


class LauncherGoneError(ToolError):
    """The launcher ended (killed from outside): the caller starts another."""



class UnusableRepliesError(MylmError):
    """The model gave `max_consecutive_failures` replies in a row that could be neither run nor accepted."""


class NoToolsError(MylmError):
    """The model called a tool, but the agent was given no tools at all: correcting it cannot help."""


class RepeatedCallError(MylmError):
    """The model made the same call (tool and arguments) `max_repeated_calls` times in a row, getting the same
    result each time: it is stuck, and more iterations would only repeat it (`StopReason.REPEATED_CALL`).
    `answer` is what it answered when then asked for an answer without tools (may be empty)."""

    exit_code = 5

    def __init__(self, message: str, *, answer: str = "") -> None:
        super().__init__(message)
        self.answer = answer


class DownloadError(MylmError):
    """A model could not be fetched from the package index, or its bytes failed their checksum."""


class RunTimeoutError(MylmError):
    """The run's wall-clock budget was spent."""

    exit_code = 4


class CancelledError(MylmError):
    """The run was cancelled by the user or the caller's cancel token."""

    exit_code = 130


class SandboxError(MylmError):
    """The kernel refused a call while mylm built or applied a command's sandbox; the command did not run."""


class TaskFileError(ConfigError):
    """A task line is not valid; the message names the line."""


class ResultsFileError(ConfigError):
    """The results file cannot be read or written."""


class WorkspaceError(MylmError):
    """A task's workspace could not be made (its source is missing or cannot be copied)."""


class WorkspaceRefusedError(WorkspaceError):
    """A workspace an MCP client asked for lies outside its declared roots or the server's `--allow-root`."""


class SessionNotFoundError(MylmError):
    """No saved session (of the kind asked for) has that id."""


class WorkersFailed(MylmError):
    """`mylm serve --workers N`: the workers kept dying, so the server stopped."""


class RequestError(MylmError):
    """A request the server cannot serve; shown to the client in its API's error shape, never as a traceback.

    `kind` is the OpenAI error type; each route maps it to its own vocabulary (Anthropic's error types)."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None,
                 kind: str = "invalid_request_error", code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param
        self.kind = kind
        self.code = code
