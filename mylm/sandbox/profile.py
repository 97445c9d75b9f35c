"""What a confined command may read and write: the two profiles, as lists of paths any backend can enforce."""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..core.types import Grant
from .hidden import Secrets, mylm_private

#: The system, readable (and executable) by every command.
SYSTEM_READ = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc",
               "/sys/devices/system/cpu")
#: Devices a command may read; of them, the ones it may also write. Not the rest of /dev: as root, a raw disk
#: (/dev/sda) or /dev/mem would read everything the sandbox hides.
DEVICES_READ = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/fd",
                "/dev/stdin", "/dev/stdout", "/dev/stderr")
DEVICES_WRITE = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty")
#: Credential places in $HOME: never readable, even when the workspace or a tool install contains them. A floor,
#: not the rule: outside the workspace, commands read only what is granted (the system, what the programs on
#: PATH need, `HOME_READ`), and a workspace that holds $HOME hides its dot-entries but `HOME_DOTFILES`.
HOME_SECRETS = (
    ".ssh", ".aws", ".gnupg", ".netrc", ".config/gh", ".docker", ".kube", ".git-credentials", ".pypirc",
    ".npmrc", ".azure", ".password-store", ".pgpass", ".config/gcloud", ".local/share/keyrings",
    ".cargo/credentials", ".cargo/credentials.toml", ".config/hub", ".vault-token",
    ".config/git/credentials", ".s3cfg", ".boto", ".fly/config.yml", ".pulumi/credentials.json",
    ".terraform.d/credentials.tfrc.json", ".terraformrc", ".config/doctl", ".config/rclone", ".config/hcloud",
    ".config/op", ".config/sops", ".config/pip", ".config/configstore", ".config/stripe", ".netlify",
    ".wrangler", ".config/.wrangler", ".oci", ".m2/settings.xml", ".gradle/gradle.properties",
    ".gem/credentials",
    ".composer/auth.json", ".config/composer/auth.json", ".huggingface", ".cache/huggingface/token",
    ".ollama/id_ed25519", ".Xauthority", ".ICEauthority", ".mozilla", ".thunderbird", ".config/google-chrome",
    ".config/chromium", ".config/BraveSoftware", ".bash_history", ".zsh_history", ".history", ".sh_history",
    ".python_history", ".psql_history", ".mysql_history", ".sqlite_history", ".node_repl_history",
    ".rediscli_history", ".dbshell", ".irb_history", ".lesshst", ".viminfo", ".local/share/fish/fish_history",
    ".local/share/com.vercel.cli", ".config/heroku", ".kaggle", ".databrickscfg", ".dropbox",
)
#: Files in $HOME that programs cannot run without: git stops at an unreadable ~/.gitconfig ("unknown error
#: occurred while reading the configuration files"). Of ~/.config/git only the files git reads as configuration:
#: the directory also holds git's credential store.
HOME_READ = (".gitconfig", ".config/git/config", ".config/git/attributes", ".config/git/ignore")
#: When the workspace holds $HOME, the dot-entries at its top that stay readable: shell and editor settings
#: (and what the floor above still carves). Every other dot-entry there (a tool's state, often a token) is
#: hidden until the user grants it by making it the workspace.
HOME_DOTFILES = (
    ".bashrc", ".bash_profile", ".bash_logout", ".profile", ".zshrc", ".zprofile", ".zshenv", ".inputrc",
    ".gitconfig", ".gitignore", ".gitignore_global", ".vimrc", ".vim", ".tmux.conf", ".editorconfig",
    ".config", ".local", ".cache", ".npm", ".cargo", ".rustup", ".pyenv", ".nvm", ".rbenv", ".asdf", ".deno",
    ".bun", ".go", ".dotnet", ".sdkman", ".condarc", ".conda", ".julia", ".ghcup", ".opam", ".ipython",
    ".jupyter", ".pylintrc", ".flake8", ".npmrc.example", ".clang-format", ".selected_editor", ".wget-hsts",
)
#: Secrets of the system itself (readable by root, who may run mylm).
SYSTEM_SECRETS = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers",
                  "/etc/sudoers.d", "/etc/ssl/private", "/etc/security/opasswd")
_SYSTEM_SECRET_GLOBS = ("/etc/ssh/ssh_host_*key",)


@dataclass(frozen=True)
class Profile:
    """One command's confinement, as absolute real paths.

    `read` and `write` are trees granted whole; nothing under `hidden` is granted, whatever contains it.
    """

    grant: Grant
    workspace: str
    read: tuple[str, ...]
    write: tuple[str, ...]
    devices_read: tuple[str, ...]
    devices_write: tuple[str, ...]
    hidden: frozenset[str]
    network: bool
    #: The command's private temporary directory (workspace-write only), given to it as TMPDIR.
    tmpdir: str | None = None
    #: A descriptor holding the workspace open (`mylm mcp` tasks): its rule is made on that object, not on
    #: whatever the path leads to when the rule is made.
    anchor: int | None = None


def build_profile(
    grant: Grant,
    workspace: str | os.PathLike[str],
    *,
    network: bool,
    tmpdir: str | None = None,
    environ: Mapping[str, str] | None = None,
    private: Sequence[str | os.PathLike[str]] = (),
    anchor: int | None = None,
) -> Profile:
    """The profile for `grant` in `workspace`. `private` adds directories never readable (mylm's own config
    and data); `environ` gives PATH and HOME (default: this process's)."""
    env = os.environ if environ is None else environ
    system, hidden = _system(env.get("PATH", os.defpath), env.get("HOME") or str(Path.home()),
                             mylm_private(private, env), os.geteuid() == 0)
    ws = _real(str(workspace))
    home = _real(env.get("HOME") or str(Path.home()))
    if home == ws or home.startswith(ws.rstrip(os.sep) + os.sep):
        hidden = hidden | _home_dot_entries(home, system)
    writing = grant == "workspace-write"
    write = [ws, *([_real(tmpdir)] if tmpdir else [])] if writing else []
    return Profile(
        grant=grant,
        workspace=ws,
        read=tuple(dict.fromkeys([*system, ws])),
        write=tuple(dict.fromkeys(write)),
        devices_read=DEVICES_READ,
        devices_write=DEVICES_WRITE,
        hidden=hidden,
        network=network and writing,
        tmpdir=tmpdir if writing else None,
        anchor=anchor,
    )


@lru_cache(maxsize=8)
def _system(
    path: str, home: str, private: tuple[str, ...], root: bool
) -> tuple[tuple[str, ...], frozenset[str]]:
    """The system trees to read and the paths to hide, for one PATH and HOME: read once per process, since
    the layout of /usr and /etc does not change under a running mylm."""
    home = _real(home)
    # The account's own home too, in case HOME points elsewhere and the workspace holds the real one.
    homes = {home, *_account_home()}
    hidden = {os.path.join(h, p) for h in homes for p in HOME_SECRETS} | {_real(p) for p in private}
    if root:  # for anyone else, file permissions already keep these unreadable
        hidden |= set(SYSTEM_SECRETS) | {p for pattern in _SYSTEM_SECRET_GLOBS for p in glob.glob(pattern)}
    read = [*SYSTEM_READ, *_path_dirs(path, home), *_etc_link_targets()]
    read += [os.path.join(home, p) for p in HOME_READ]
    return tuple(dict.fromkeys(_real(p) for p in read if p)), frozenset(_real(h) for h in hidden)


def secrets_for(workspace: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None,
                private: Sequence[str | os.PathLike[str]] = ()) -> Secrets:
    """What no auto-approved tool or command may read around `workspace`: `HOME_SECRETS` in `$HOME` and the
    account's home, mylm's own directories and `private`, the system's secrets as root and, when the
    workspace holds `$HOME`, its dot-entries but `HOME_DOTFILES`; and the secret names inside the workspace."""
    env = os.environ if environ is None else environ
    home = env.get("HOME") or str(Path.home())
    return _secrets(_real(str(workspace)), home, mylm_private(private, env), os.geteuid() == 0)


@lru_cache(maxsize=16)
def _secrets(workspace: str, home: str, private: tuple[str, ...], root: bool) -> Secrets:
    hidden = _system("", home, private, root)[1]
    home = _real(home)
    if home == workspace or home.startswith(workspace.rstrip(os.sep) + os.sep):
        hidden |= _home_dot_entries(home, ())
    return Secrets(workspace, hidden)


def _home_dot_entries(home: str, granted: tuple[str, ...]) -> frozenset[str]:
    """The dot-entries at the top of `home` that a workspace holding it does not show: all but `HOME_DOTFILES`
    and what a granted tree (a program on PATH) needs."""
    try:
        names = [entry.name for entry in os.scandir(home) if entry.name.startswith(".")]
    except OSError:
        return frozenset()
    hidden: set[str] = set()
    for name in names:
        if name in HOME_DOTFILES:
            continue
        path = os.path.join(home, name)
        needed = [g for g in granted if g == path or g.startswith(path + os.sep)]
        if not needed:
            hidden.add(path)
        elif path not in needed:
            # An install such as ~/.pulumi with bin/ on PATH: what is beside what its programs need is hidden.
            try:
                children = [entry.path for entry in os.scandir(path)]
            except OSError:
                continue
            hidden |= {c for c in children if not any(g == c or g.startswith(c + os.sep) for g in needed)}
    return frozenset(hidden)


def _account_home() -> list[str]:
    try:
        import pwd

        return [_real(pwd.getpwuid(os.getuid()).pw_dir)]
    except (ImportError, KeyError):
        return []


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


#: What an install prefix holds that its programs need to run: libraries, data, helpers, a venv's settings.
_PREFIX_PARTS = ("bin", "lib", "lib64", "libexec", "share", "pyvenv.cfg")
#: Beside a `shims` directory (pyenv, rbenv, nodenv, asdf): what a shim runs.
_SHIM_PARTS = ("bin", "libexec", "plugins", "versions", "installs", "lib", "version")


def _path_dirs(path: str, home: str) -> list[str]:
    """The directories on PATH and what their programs need, never the directory they were installed in:
    for `PREFIX/bin`, PREFIX's bin, lib, share, libexec and pyvenv.cfg (and, for a virtual environment, the
    same of the installation its python links to); for a `shims` directory, the version manager's own
    parts; for ~/.cargo/bin, ~/.rustup (cargo's binaries are rustup's proxies). ~/.pulumi/bin or ~/.fly/bin
    thus grant their programs but not the tokens kept beside them."""
    found: list[str] = []
    for entry in path.split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue  # a relative PATH entry would grant whatever the current directory is
        real = _real(entry)
        if real == home or home.startswith(real.rstrip(os.sep) + os.sep):
            continue  # $HOME itself (or a directory holding it) on PATH is not a tool install
        found.append(real)
        parent, name = os.path.dirname(real), os.path.basename(real)
        if parent in ("/", home):
            continue
        if name == "bin" and parent == os.path.join(home, ".local"):
            found.append(os.path.join(parent, "lib"))  # not ~/.local/share: other programs' data and state
        elif name == "bin":
            found += [os.path.join(parent, part) for part in _PREFIX_PARTS]
            found += _venv_base(parent)
        elif name == "shims":
            found += [os.path.join(parent, part) for part in _SHIM_PARTS]
        if real == os.path.join(home, ".cargo", "bin"):
            found.append(os.path.join(home, ".rustup"))
    # Never $HOME itself or a directory holding it, whatever a PATH entry or a pyvenv.cfg says.
    return [p for p in found if p != home and not home.startswith(p.rstrip(os.sep) + os.sep)]


def _venv_base(prefix: str) -> list[str]:
    """For a virtual environment, the installation its python links to (`home = .../bin` in pyvenv.cfg)."""
    try:
        with open(os.path.join(prefix, "pyvenv.cfg"), encoding="utf-8") as f:
            lines = f.read(4096).splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "home" and os.path.isabs(value.strip()):
            base = os.path.dirname(_real(value.strip()))
            return [os.path.join(base, part) for part in _PREFIX_PARTS]
    return []


def _etc_link_targets() -> list[str]:
    """Where /etc's own links lead (resolv.conf into /run on systemd machines), so name resolution works."""
    try:
        entries = list(os.scandir("/etc"))
    except OSError:
        return []
    targets = [os.path.realpath(e.path) for e in entries if e.is_symlink() and e.name in _ETC_LINKS]
    return [t for t in targets if not t.startswith("/proc/")]  # /proc is granted whole (mtab -> /proc/self)


_ETC_LINKS: frozenset[str] = frozenset(
    {"resolv.conf", "hosts", "localtime", "nsswitch.conf", "mtab", "os-release", "ssl"}
)


def split_hidden(root: str, hidden: frozenset[str]) -> list[tuple[str, bool]] | None:
    """How to grant the tree at `root` without what is `hidden` under it: None if `root` is hidden or inside
    something hidden; else (path, whole) pairs: `whole` paths are granted with everything beneath, the others
    (directories on the way to a hidden path) only so that they can be listed."""
    if any(root == h or root.startswith(h + os.sep) for h in hidden):
        return None
    inside = [h for h in hidden if h.startswith(root.rstrip(os.sep) + os.sep)]
    if not inside:
        return [(root, True)]
    parts: list[tuple[str, bool]] = [(root, False)]
    try:
        entries = list(os.scandir(root))
    except OSError:
        return parts
    for entry in entries:
        child = entry.path
        if child in hidden:
            continue
        if entry.is_dir(follow_symlinks=False) and any(h.startswith(child + os.sep) for h in inside):
            parts += split_hidden(child, hidden) or []
        else:
            parts.append((child, True))
    return parts
