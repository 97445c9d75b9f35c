"""Secret redaction, the one place for it: every sink mylm writes to (transcripts, logs, the terminal) and
every tool output the model sees. Known values (secret-named variables, URL credentials), then shapes."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from .environ import environment_items

REDACTED = "[REDACTED]"
#: Environment values shorter than this are not treated as secrets: too many ordinary words would match.
MIN_SECRET_LENGTH = 8
#: Variable names whose values are secrets (T9, issue 10: `DB_PASS`, `PGPWD`, `SENTRY_DSN`, `SLACK_WEBHOOK`).
_SECRET_NAME = re.compile(
    r"KEY|SECRET|TOKEN|PASS|PWD|DSN|WEBHOOK|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE", re.IGNORECASE
)
#: Values of secret-named variables that are settings rather than secrets (`KEY_FILE=/path`, `TOKEN_TTL=3600`).
_NOT_A_SECRET = re.compile(r"[0-9]+|(?:true|false|yes|no|on|off)|/[^\s]*", re.IGNORECASE)

# Well-known credential shapes (goose's redactor and the providers' documented key formats).
_PATTERNS = (
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
    r"\bsk-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_\-]{16,}",
    r"\bgh[pousr]_[A-Za-z0-9]{30,}",
    r"\bgithub_pat_[A-Za-z0-9_]{40,}",
    r"\bglpat-[A-Za-z0-9_\-]{20,}",
    r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\bAIza[0-9A-Za-z_\-]{35}",
    r"\bhf_[A-Za-z0-9]{30,}",
    r"\bgsk_[A-Za-z0-9]{30,}",
    r"\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}",
    # Shapes from gitleaks' default rules (github.com/gitleaks/gitleaks, config/gitleaks.toml, MIT licence:
    # stripe-access-token, npm-access-token, pypi-upload-token, digitalocean-pat/-access-token/-refresh-token,
    # slack-webhook-url) and detect-secrets' plugins (github.com/Yelp/detect-secrets, Apache-2.0: stripe,
    # sendgrid, slack, pypi_token), loosened where a real token can be longer; Google's OAuth access tokens
    # (`ya29.`) as Google documents them.
    r"\b[rs]k_(?:live|test|prod)_[A-Za-z0-9]{10,99}",
    r"\bnpm_[A-Za-z0-9]{36}",
    r"\bpypi-AgE[A-Za-z0-9_\-]{50,}",
    r"\bya29\.[0-9A-Za-z_\-]{20,}",
    r"\bSG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}",
    r"\bdo[por]_v1_[a-f0-9]{64}",
    r"(?<=hooks\.slack\.com/)(?:services|workflows|triggers)/[A-Za-z0-9+/_\-]{20,}",
)
# `Authorization: Bearer x`, then assignments to a secret-named key, in any case: `API_KEY=x` and `password = x`
# in .env files, shells and INI, `--token=x` and `?token=x`, `api_token: x` in YAML (at a line's start or in a
# flow mapping), `"secret": "x"` in JSON. The name stays readable, the value goes; values that are code or
# settings rather than secrets stay (see `_settled`), and a quoted value holding a space is prose, not a secret.
_KEY_NAME = r"[a-z0-9_.\-]*(?:pass|pwd|secret|token|credential|key(?![a-z]))[a-z0-9_.\-]*"
_ASSIGNMENTS = (
    r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/\-]{16,}=*",
    # `Authorization: Basic dXNlcjpwYXNz` (any scheme) and a `Cookie:` or `Set-Cookie:` header's whole value.
    (
        r"(?i)(\b(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:[a-z]+[ \t]+)?)"
        r"(?=[^\s\"',;]*[0-9+/=_.\-])[^\s\"',;]{8,}"
    ),
    r"(?i)(\b(?:set-)?cookie[\"']?[ \t]*:[ \t]*[\"']?)(?=[^\r\n\"'=]+=)[^\r\n\"']+",
    (
        rf"(?i)((?<![^\s;,{{(?&'\"\-])[\"']?{_KEY_NAME}[\"']?[ \t]*=[ \t]*)(?!=)"
        r"(?P<value>(?P<q>[\"']?)[^\s'\"]+(?P=q))"
    ),
    (
        rf"(?im)((?:^[ \t]*(?:-[ \t]+)?|[{{,][ \t]*)(?P<kq>[\"']?){_KEY_NAME}(?P=kq)"
        r"(?:[ \t]*:[ \t]+|[ \t]*:(?=[\"'])))(?P<value>(?P<q>[\"']?)[^\s'\",}\]]+(?P=q))"
    ),
    # `.netrc` and `.authinfo` (`machine h login bob password x`, on one line or many).
    (
        r"(?i)(\b(?:login|machine|account)[ \t]+\S+\s+(?:(?:login|account|port)[ \t]+\S+\s+)?(?:password|passwd)[ \t]+)"
        r"(?P<value>(?P<q>[\"']?)[^\s'\"]+(?P=q))"
    ),
    # A config line that is only a secret's name and its value (redis' `requirepass x`, `DB_PASSWD x`): the
    # value must look like one (8 characters or more, with a digit or a sign), which a word of prose does not.
    rf"(?im)(^[ \t]*{_KEY_NAME}[ \t]+)(?P<value>(?P<q>)(?=[^\s]*[0-9!#$%^&*+/=_\-])[^\s'\"]{{8,}})[ \t]*$",
    # An XML element named for a secret: `<password>x</password>`, `<apiKey>x</apiKey>` (not a plist's `<key>`,
    # which names a setting).
    rf"(?i)(<(?!key>)(?P<tag>{_KEY_NAME})(?:[ \t][^<>]*)?>)(?P<value>(?P<q>)[^<>\s]+)(?=</(?P=tag)>)",
)
#: Values of secret-named keys that are not secrets: settings, placeholders, references and code.
_SETTLED = re.compile(
    r"(?i)(?:true|false|yes|no|on|off|null|none|nil|undefined|required|optional|[0-9]+(?:\.[0-9]+)?"
    r"|[/~$%<{\[(*&!|>#@].*|\.{1,2}/.*|[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+|[a-z_][a-z0-9_.]*[(\[].*)"
)

#: `scheme://user:password@host` and `scheme://TOKEN@host` (git remotes, `url.*.insteadOf`): the user and
#: password go, the scheme and host stay readable. A user name alone shorter than 8 (`ssh://git@host`) stays.
_URL_CREDENTIALS = re.compile(
    r"(?i)\b([a-z][a-z0-9+.\-]{1,20}://)(?:[^\s/?#@:\"'<>]*:[^\s/?#@\"'<>]+|[^\s/?#@:\"'<>]{8,})@"
)

#: How every credential shape in `_PATTERNS` begins.
_SECRET_PREFIXES = (
    "sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "xox", "AKIA", "ASIA", "AIza", "hf_",
    "gsk_", "eyJ", "-----BEGIN", "sk_", "rk_", "npm_", "pypi-", "ya29.", "SG.", "dop_v1_", "doo_v1_", "dor_v1_",
    "hooks.slack.com",
)
_PEM_END = re.compile(r"-----END [A-Z ]*PRIVATE KEY-----")
#: Words that come before a secret in `_ASSIGNMENTS` (searched for first: a literal search is fast).
_SECRET_NAMES = ("bearer", "key", "secret", "token", "pass", "pwd", "credential", "authorization", "cookie")
#: A secret's name near the end of streamed text: its value may still be coming. Made of `_SECRET_NAMES`, which
#: `_sensitive_tail` looks for before searching with it.
_SENSITIVE_TAIL = re.compile(r"(?i)(?:" + "|".join(_SECRET_NAMES) + r")[^\n]{0,40}\Z")
#: The longest text `_SENSITIVE_TAIL` can match (its longest name and 40 more characters): a search needs to
#: start only this far from the end. It has no look-behind and no anchor but `\Z`, so a match found from there
#: is the one a search of the whole text finds (matches are at most this long and the leftmost one is kept).
_SENSITIVE_TAIL_REACH = len("authorization") + 40


def _sensitive_tail(text: str) -> re.Match[str] | None:
    """`_SENSITIVE_TAIL`'s match near the end of `text` (searched from `_SENSITIVE_TAIL_REACH` before it).

    Its case-insensitive alternation is tried at every position (~6 µs over the reach, once per streamed chunk),
    and most text names no secret: an ASCII stretch that holds none of the names in lower case cannot match (on
    ASCII text, a case-insensitive match is an ASCII one, which `str.lower` finds too). Anything else (a name
    there, any non-ASCII character, whose case rules differ) is searched by the pattern itself.
    """
    start = max(0, len(text) - _SENSITIVE_TAIL_REACH)
    tail = text[start:]
    if tail.isascii():
        lowered = tail.lower()
        if not any(name in lowered for name in _SECRET_NAMES):
            return None
    return _SENSITIVE_TAIL.search(text, start)


class Redactor:
    """Replaces secrets in text with `[REDACTED]`: first the exact values it was given, then credential shapes."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first, so a secret that contains another is replaced whole.
        values = {s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH}
        self.secrets: tuple[str, ...] = tuple(sorted(values, key=len, reverse=True))
        self._exact = re.compile("|".join(re.escape(s) for s in self.secrets)) if self.secrets else None
        self._patterns = re.compile("|".join(f"(?:{p})" for p in _PATTERNS), re.DOTALL)
        self._assignments = tuple(re.compile(p) for p in _ASSIGNMENTS)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None, extra: Iterable[str | None] = ()) -> Redactor:
        """A redactor for the values of secret-named environment variables, plus `extra` (the API key in use)."""
        env = os.environ if environ is None else environ
        found = [value for name, value in env.items() if is_secret_name(name) and _is_secret_value(value)]
        # A URL with credentials is a secret whatever its variable is called (DATABASE_URL, REDIS_URL).
        urls = [value for value in env.values() if "://" in value and "@" in value]
        found += [secret for url in urls for secret in url_secrets(url) if _is_secret_value(secret)]
        return cls([*found, *(e for e in extra if e)])

    def inert(self, text: str) -> bool:
        """Whether `redact` leaves `text` as it is by its first tests alone: no known secret, no credential's
        prefix, no URL with an `@`, no secret's name. Each test looks for a substring, so a part of an inert text
        is inert too."""
        return (self._exact is None or self._exact.search(text) is None) and \
            not any(prefix in text for prefix in _SECRET_PREFIXES) and \
            not ("://" in text and "@" in text) and not _names_in(text)

    def redact(self, text: str) -> str:
        """`text` with every known secret and credential-shaped string replaced."""
        if not text:
            return text
        if self._exact is not None:
            text = self._exact.sub(REDACTED, text)
        # Cheap literal searches first: most text (tool output, long answers) holds no credential at all.
        if any(prefix in text for prefix in _SECRET_PREFIXES):
            text = self._patterns.sub(REDACTED, text)
        if "://" in text and "@" in text:
            text = _URL_CREDENTIALS.sub(lambda m: m.group(1) + REDACTED + "@", text)
        if _names_in(text):
            for pattern in self._assignments:
                text = pattern.sub(_settled, text)
        return text

    def redact_known(self, text: str) -> str:
        """`text` with only the exact known secret values replaced: for approval prompts, where a credential-shaped
        pattern could swallow the command around it and hide what will run (`TOKEN=x;curl …|sh` is not a value)."""
        if not text or self._exact is None:
            return text
        return self._exact.sub(REDACTED, text)

    def redact_value(self, value: Any) -> Any:
        """A JSON-like value with every string in it redacted (keys included)."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, Mapping):
            return {self.redact(str(k)): self.redact_value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.redact_value(v) for v in value]
        return value

    def stream(self) -> StreamRedactor:
        """A redactor for text that arrives in pieces, where a secret may be split between two pieces."""
        return StreamRedactor(self)


class StreamRedactor:
    """Redacts streamed text, holding back an unfinished word only while the next piece could make it a secret.

    Held back: a word that starts like a credential (`sk-`, `ghp_`, ...), a possible start of a known secret
    value, and the text after a secret's name (`Bearer`, `token:`) until its value has ended. Everything else
    streams at once.
    """

    #: A "word" longer than this is let through in parts (nothing we recognise is that long).
    MAX_HOLD = 8192
    #: How much already-shown text is kept to recognise a secret's name before its value (`Bearer `).
    CONTEXT = 80

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._held = ""
        self._context = ""

    def feed(self, text: str) -> str:
        """Add a piece; return what can be shown now (redacted)."""
        self._held += text
        keep = self._keep(self._held)
        ready, self._held = self._held[: len(self._held) - keep], self._held[len(self._held) - keep :]
        return self._release(ready)

    def flush(self) -> str:
        """Return (redacted) whatever is still held back: the stream has ended or paused for good."""
        ready, self._held = self._held, ""
        return self._release(ready)

    def _release(self, ready: str) -> str:
        if not ready:
            return ""
        # Redact with the text already shown in front, so `Bearer ` shown earlier still marks the value as secret.
        seen = self._context + ready
        if self._redactor.inert(seen):
            # Nothing to redact in the context and the piece together, nor so in the context alone (a part of
            # an inert text): both redact to themselves, and the piece is what the lines below would return.
            self._context = seen[-self.CONTEXT :]
            return ready
        before = self._redactor.redact(self._context)
        both = self._redactor.redact(seen)
        self._context = seen[-self.CONTEXT :]
        return both[len(before) :] if both.startswith(before) else self._redactor.redact(ready)

    def _keep(self, text: str) -> int:
        begin = text.rfind("-----BEGIN")
        if begin >= 0 and not _PEM_END.search(text, begin) and len(text) - begin <= self.MAX_HOLD * 4:
            header = text[begin:].split("\n", 1)
            if len(header) == 1 or "PRIVATE KEY-----" in header[0]:
                return len(text) - begin  # a PEM block spans lines: hold it until its END line is complete
        start = _word_start(text, len(text))
        word = len(text) - start if _could_become_secret(text[start:]) else 0
        seen = self._context + text
        near = _sensitive_tail(seen)
        if near is not None:
            # `Bearer x`, `"token": "x"`, `password = x`: the value comes some words after the name.
            word = max(word, len(seen) - max(_word_start(seen, near.start()), len(self._context)))
        prefix = 0
        for secret in self._redactor.secrets:
            for n in range(min(len(secret) - 1, len(text)), prefix, -1):
                if text.endswith(secret[:n]):
                    prefix = n
                    break
        keep = min(max(word, prefix), self.MAX_HOLD, len(text))
        # Never release part of a whole known secret that the holds above cut through (`my pass phrase`).
        cut = len(text) - keep
        for secret in self._redactor.secrets:
            start = text.rfind(secret, max(cut - len(secret) + 1, 0))
            if 0 <= start < cut < start + len(secret):
                cut = start
        return len(text) - cut


def url_secrets(url: str | None) -> list[str]:
    """The credentials a URL carries, as written and decoded: the user and password, and every query value."""
    if not url:
        return []
    from urllib.parse import parse_qsl, unquote, urlsplit

    try:
        parts = urlsplit(url)
        found = [parts.username or "", parts.password or ""]
    except ValueError:  # a malformed port or netloc: still hide what precedes an `@`
        netloc = url.partition("://")[2].partition("/")[0]
        found = list(netloc.rpartition("@")[0].partition(":")[::2])
        parts = None
    query = parts.query if parts is not None else url.partition("?")[2].partition("#")[0]
    found += [value for _, value in parse_qsl(query, keep_blank_values=True)]
    found += [raw.partition("=")[2] for raw in query.split("&")]
    return sorted({v for value in found for v in (value, unquote(value)) if v})


def public_url(url: str) -> str:
    """`url` fit to show or save: the user, password, query and fragment replaced by `[REDACTED]`."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return REDACTED if "@" in url or "?" in url else url
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port is not None else "")
    if "@" in parts.netloc:
        netloc = f"{REDACTED}@{netloc}"
    query = REDACTED if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, REDACTED if parts.fragment else ""))


def is_secret_name(name: str) -> bool:
    """Whether an environment variable called `name` probably holds a secret (keys, tokens, passwords)."""
    return bool(_SECRET_NAME.search(name))


def redact(text: str, environ: Mapping[str, str] | None = None) -> str:
    """`text` redacted for the secrets of `environ` (default: this process's environment) and every credential
    shape: what a tool returns to the model goes through here."""
    items = environment_items() if environ is None else tuple(sorted(environ.items()))
    return _environment_redactor(items).redact(text)


@lru_cache(maxsize=4)
def _environment_redactor(items: tuple[tuple[str, str], ...]) -> Redactor:
    # The environment rarely changes within a run: build (and compile) the redactor once per version of it.
    return Redactor.from_environment(dict(items))


def _settled(match: re.Match[str]) -> str:
    """The assignment with its value redacted, unless the value is a setting or code (`_SETTLED`)."""
    if "value" in match.re.groupindex:
        quote = match.group("q")
        bare = match.group("value")[len(quote) : len(match.group("value")) - len(quote)]
        if _SETTLED.fullmatch(bare) or bare == REDACTED:
            return match.group(0)
        return match.group(1) + quote + REDACTED + quote
    return match.group(1) + REDACTED


def _names_in(text: str) -> bool:
    """Whether `text` names a secret (`_SECRET_NAMES`, in any case): the test before `_ASSIGNMENTS` are run."""
    lowered = text.lower()
    return any(name in lowered for name in _SECRET_NAMES)


def _could_become_secret(word: str) -> bool:
    """Whether more text could turn the end of `word` into a credential shape (`s`, `sk-pro`, `"ghp_12`)."""
    for i in range(len(word)):
        if i and word[i - 1].isalnum():
            continue
        piece = word[i:]
        if any(piece.startswith(p) or p.startswith(piece) for p in _SECRET_PREFIXES):
            return True
    return False


def _word_start(text: str, end: int) -> int:
    return max(text.rfind(c, 0, end) for c in " \t\n") + 1


def _is_secret_value(value: str) -> bool:
    return len(value) >= MIN_SECRET_LENGTH and not _NOT_A_SECRET.fullmatch(value)
