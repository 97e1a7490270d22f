"""What a secret looks like: the rules `redact.py` applies, by shape (vendor formats) and by context (cues).

Each `Rule` is a regex with the literal ``gates`` it cannot match without (so the redactor can skip it on
text that lacks all of them) and an optional ``accept`` check on the candidate. Only the span of the groups
named ``s`` / ``s1`` / ``s2`` is replaced when the pattern has them, so ``password=`` keeps its key; otherwise
the whole match is the secret.

A ``folded`` rule is written in lower case and matched against the text with A-Z lower-cased (only those:
positions stay put, and a lower-case gate is then an exact test); that is much faster than ``re.IGNORECASE``.
Context rules start at their cue word, not at a word boundary before it, for the same reason; their
``accept`` looks at the character before the cue instead.

Context rules judge the value they found: after a weak cue ("the key is …") it must look like a credential
(letters with digits, mixed case, symbols or high entropy), after a strong one (``password=``, ``密码：``)
anything but a placeholder or an ordinary word will do.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["RULES", "Hit", "Rule", "fold_ascii"]


def fold_ascii(text: str) -> str:
    """``text`` with A-Z lower-cased and every other character left alone (same length, same positions)."""
    if text.isascii():
        return text.lower()
    # UTF-8 bytes below 0x80 are only ever ASCII characters, so bytes.lower() touches nothing else.
    return text.encode("utf-8", "surrogatepass").lower().decode("utf-8", "surrogatepass")


@dataclass(frozen=True, slots=True)
class Hit:
    """A match of a rule, read back from the original (not lower-cased) text."""

    match: re.Match[str]
    text: str

    def group(self, name: str) -> str:
        """The original text of group ``name`` ('' when it did not take part)."""
        start, end = self.match.span(name)
        return self.text[start:end] if start >= 0 else ""

    @property
    def value(self) -> str:
        """The candidate secret."""
        return next((v for v in (self.group(g) for g in ("s", "s1", "s2") if g in self.match.re.groupindex) if v),
                    "")

    @property
    def whole(self) -> str:
        """The original text of the whole match."""
        return self.text[self.match.start() : self.match.end()]

    def before(self, name: str) -> str:
        """The character in front of group ``name`` ('' at the start of the text)."""
        start = self.match.start(name)
        return self.text[start - 1] if start > 0 else ""

    def word_before(self, name: str) -> str:
        """Group ``name`` extended to the left over ``[A-Za-z0-9_.-]`` (the whole ``DB_PASSWORD``)."""
        start, end = self.match.span(name)
        while start > 0 and ((self.text[start - 1].isascii() and self.text[start - 1].isalnum())
                             or self.text[start - 1] in "_.-"):
            start -= 1
        return self.text[start:end]


@dataclass(frozen=True, slots=True)
class Rule:
    """One secret shape: ``pattern`` finds it, ``gates`` say when it can be skipped, ``accept`` vets a hit.

    ``anchored``: every match starts with one of the gates, so only those positions need trying.
    ``prefilter``: a cheap regex (led by a literal) that finds something every match contains.
    ``find``: finds what ``pattern.finditer`` finds (given the pattern and the text), in time linear in the text
    where the pattern alone takes quadratic time.
    """

    name: str
    pattern: re.Pattern[str]
    gates: tuple[str, ...]
    folded: bool = False
    accept: Callable[[Hit], bool] | None = None
    anchored: bool = False
    prefilter: re.Pattern[str] | None = None
    find: Callable[[re.Pattern[str], str], Iterator[re.Match[str]]] | None = None

    def finditer(self, haystack: str) -> Iterator[re.Match[str]]:
        """The rule's matches in ``haystack``, in order, as ``pattern.finditer`` finds them."""
        return self.pattern.finditer(haystack) if self.find is None else self.find(self.pattern, haystack)


# -- judging a candidate value ---------------------------------------------------------------------------

# Words that follow "password is" / "the token was" in ordinary prose about credentials.
_PROSE_WORDS = frozenset("""
a an the my your our his her its their this that these those it there here what which who whose
is was are were be been being not no none null nil true false yes ok okay fine good bad wrong right
correct incorrect invalid valid expired required optional needed necessary mandatory missing empty blank
set unset stored saved hashed salted encrypted encoded changed reset rotated revoked leaked compromised
exposed protected masked hidden shown visible redacted sent passed used working broken too very really
still now then also just only never always already again same different new old long short weak strong
secure insecure safe unsafe case sensitive insensitive in on at for from with without of to and or but
by as via into onto like should must will can cannot could would may might gets got get has have had
do does did done enough wrong unknown forgotten lost needed sure please thanks generated random unique
stale fresh active inactive enabled disabled supported unsupported available unavailable included
something anything nothing everything same one two here's whatever below above following
""".split())
_PLACEHOLDER = re.compile(
    r"(?i)^(?:\*+|x{3,}|\.{3,}|…|<[^>]*>|\{\{?[^}]*\}\}?|\$\{?\w+\}?|%\(?\w+\)?s?|\[redacted\]|"
    r"(?:your|my|the)[_-]\w+|changeme|placeholder|example|redacted|hidden|secret|password|token|none|null|"
    r"true|false|undefined|required|optional|env|os\.environ.*|process\.env.*|getenv.*)$"
)
_PLAIN_SUFFIXES = ("ed", "ing", "ly", "able", "ible", "tion", "ment", "ness")


_PATH = re.compile(r"(?:~|\.{1,2})?/|[\w.\-]*/[\w./\-]*\.\w{1,5}$")


def _is_placeholder(value: str) -> bool:
    """A stand-in, a prose word or a file path where a value would be: not a credential."""
    return bool(_PLACEHOLDER.match(value) or _PATH.match(value)) or value.lower() in _PROSE_WORDS


def _is_plain_word(value: str) -> bool:
    """An ordinary lower-case word ("policy", "reset", "working"): not what a credential looks like."""
    word = value.rstrip(".,;:!?")
    return word.isascii() and word.isalpha() and word.islower() and (
        len(word) <= 10 or word.endswith(_PLAIN_SUFFIXES) or word in _PROSE_WORDS)


def _entropy(value: str) -> float:
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def _looks_random(value: str) -> bool:
    """A generated token: long, letters and digits, high entropy (not a word, identifier, slug or path)."""
    if len(value) < 20 or (value.count("/") > 2 and not value.endswith("=")):
        return False
    has_digit = any(c.isdigit() for c in value)
    return has_digit and any(c.isalpha() for c in value) and _entropy(value) >= 3.5


def _credential_like(value: str) -> bool:
    """Has what a chosen password has (letters with digits, mixed case, symbols) or is long and random."""
    if _is_placeholder(value) or len(value) < 6:
        return False
    letters = any(c.isalpha() for c in value)
    mixed = any(c.isupper() for c in value[1:]) and any(c.islower() for c in value)
    symbols = any(not c.isalnum() and c not in "_-./" for c in value)
    return (letters and any(c.isdigit() for c in value)) or mixed or symbols or _looks_random(value)


def _strong_value(hit: Hit) -> bool:
    """After ``password=`` / ``密码：``: any real value; not a placeholder, not a bare small number."""
    value = hit.value
    if _is_placeholder(value):
        return False
    return not (value.isdigit() and len(value) < 4)


_STRONG_KEY = re.compile(r"(?i)pass|pwd|pw$|secret|credential|private|token$|(?:api|access|account|auth)[_.\-]?(?:key|token)$")


def _glued(hit: Hit, group: str) -> bool:
    """The cue is the end of a longer word ("bypass", "turkey"): no cue at all."""
    before = hit.before(group)
    return before.isascii() and before.isalnum()


def _glued_short_cue(hit: Hit, group: str) -> bool:
    return len(hit.group(group)) <= 4 and _glued(hit, group)


_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


def _not_a_literal(hit: Hit) -> bool:
    """``token = tokenizer.encode(text)``, ``key = self.key``, ``PWD=/var/log``, "password: type your own":
    code, a path or prose, not a value."""
    value = hit.group("s")
    if not value:
        return False  # a quoted value is a literal
    end = hit.match.end("s")
    follows = hit.text[end : end + 2]
    if follows[:1] in ("(", "[") or _DOTTED_NAME.fullmatch(value):
        return True
    return _is_plain_word(value) and follows[:1] == " " and follows[1:].isalpha()


def _keyed_value(hit: Hit) -> bool:
    """``key = value``: password/secret/token names take any real value, generic ``*_key`` / ``auth`` names
    a random-looking one."""
    value, key = hit.value, hit.word_before("key")
    if not _strong_value(hit) or _glued_short_cue(hit, "key") or _not_a_literal(hit):
        return False
    if not _STRONG_KEY.search(key) and not (key.isupper() and key.endswith("_KEY")):
        return _looks_random(value)
    if key.lower().endswith("token") and value.isdigit():
        return False  # a token count, not a credential
    return not _is_plain_word(value) or re.search(r"(?i)pass|pwd|pw$", key) is not None


def _prose_value(hit: Hit) -> bool:
    """After "password is" and the like: not a prose word; after the weaker cues, credential-like."""
    value = hit.value
    cue, sep = hit.group("cue").lower(), hit.group("sep").strip()
    if _is_placeholder(value) or _glued(hit, "cue"):
        return False
    if cue == "key":
        return _looks_random(value)
    if not sep:  # "password hunter2": no connecting word, so it must look like a credential
        return _credential_like(value) and not value.isdigit()
    if re.search(r"pass|pwd|pw|pin", cue):
        if sep in (":", "=", "：", "＝"):
            return not _is_plain_word(value)
        # "my password is swordfish" is a password; "my password will be transferred" is prose.
        return not _is_plain_word(value) or (len(value) >= 8 and not value.endswith(_PLAIN_SUFFIXES))
    return _credential_like(value)


def _credential_value(hit: Hit) -> bool:
    return _credential_like(hit.value)


def _basic_credentials(hit: Hit) -> bool:
    """``Basic <b64>`` in free text: only when it decodes to ``user:password``."""
    value = hit.value
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded and decoded.isascii()


def _db_client_value(hit: Hit) -> bool:
    """``psql … -W x``: the flag letter is case-sensitive (``-P`` is another option) and the value real."""
    flag = hit.text[hit.match.start() : hit.match.start("s")].rstrip()
    return flag.endswith(("-p", "-W", "-a")) and _strong_value(hit)


def _login_value(hit: Hit) -> bool:
    return not _glued(hit, "cue") and _credential_like(hit.value)


def _random_after_cue(hit: Hit) -> bool:
    before = hit.before("cue")
    return not (before.isascii() and (before.isalnum() or before in "+/")) and _looks_random(hit.value)


def _openai_key(hit: Hit) -> bool:
    body = hit.whole[3:].replace("-", "").replace("_", "")
    return not (body.isalpha() and body.islower())  # "sk-learn-for-beginners" is prose, not a key


# -- the rules -------------------------------------------------------------------------------------------

# A value in quotes may hold spaces; a bare one runs to whitespace or a separator and does not end in
# sentence punctuation. Quotes may be escaped (``\"``, ``\\\"``): tool arguments are JSON inside JSON.
_BARE = r"[^\s\"'`,;&<>(){}\[\]\\]{3,}(?<![.:!?])"
_Q = r"\\{0,3}"
_VALUE = rf"(?:{_Q}\"(?P<s1>[^\"\n\\]{{3,200}}){_Q}\"|{_Q}'(?P<s2>[^'\n\\]{{3,200}}){_Q}'|(?P<s>{_BARE}))"
_ASCII_VALUE = r"(?P<s>[!#-&(-Z^-~]{4,}(?<![.,:;!?]))"
_NOT_REDACTED = r"(?!\[redacted\])"

_KEY_NAMES = (
    r"password|passwd|passphrase|secret|api_key|apikey|api-key|token|credentials|credential|private_key|"
    r"privatekey|access_key|accesskey|account_key|accountkey|pass|pwd|pw|key|auth"
)
_KEY_GATES = ("pass", "pw", "secret", "api", "token", "credential", "private", "access", "account", "key", "auth")

# Every cue starts with one of the gates ("my AWS secret key is" matches from "secret").
_PROSE_CUES = (
    r"password|passwd|passphrase|pass ?code|pwd|pw|pin(?: code)?|secret(?: access)?(?: key)?|api[ _-]?key|"
    r"access[ _-]?key|private[ _-]?key|token|credentials?|key"
)
_PROSE_GATES = ("pass", "pw", "pin", "secret", "api", "access", "private", "token", "credential", "key")
# A value never starts with a blank: each run of blanks is taken whole (two runs that could share the same blanks
# tried every split of them, seconds for a cue followed by a few thousand spaces).
_PROSE_SEP = (
    r"(?P<sep>\s*(?::|=|：|＝)\s*|\s+(?:is|was|is now|will be|would be|has been changed to|was changed to|"
    r"changed to|set to|reset to|updated to)(?:\s*+:)?\s++|\s+(?=[^\s]*\d))"
)

_ZH_GATES = ("登录密码", "密码", "口令", "密钥", "秘钥", "私钥", "访问令牌", "令牌", "授权码")
_ZH_CUES = "|".join(_ZH_GATES)
# Each run of blanks is taken by one quantifier and kept (a value never starts with a blank): two runs that
# could share the same blanks tried every split of them, seconds for a cue followed by a few thousand spaces.
_ZH_SEP = r"(?P<sep>\s*+(?:(?:是|为|改成|改为|设为|设置为|换成|换为)\s*+(?:[:：]\s*+)?|[:：=＝]\s*+)?)"

_DB_CLIENTS = ("mysql", "mysqldump", "mysqladmin", "mariadb", "psql", "pg_dump", "pg_dumpall", "pg_restore",
               "sshpass", "mongo", "mongosh", "mongodump", "redis-cli", "smbclient")
_FLAG_NAMES = r"password|passwd|pass|pwd|token|api-key|apikey|secret|client-secret|auth-token|access-token|private-key"
# "user" only before a space: serialized group messages start with "[USER: name]".
_LOGIN_GATES = ("login", "log-in", "log on", "signin", "sign-in", "sign in", "cred", "username", "user ",
                "account", "登录", "账号", "账户", "用户名")
_LOGIN_CUES = "|".join(re.escape(gate) for gate in _LOGIN_GATES)
_RANDOM_CUES = ("password", "passwd", "pwd", "secret", "token", "key", "credential", "apikey",
                "密码", "口令", "密钥", "秘钥", "令牌")

_GITHUB = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")
_GITLAB = ("glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "glft-", "glsoat-", "glimt-")
_AWS_KEY_ID = ("AKIA", "ASIA", "ABIA", "ACCA")


def _rule(name: str, pattern: str, gates: tuple[str, ...], *, flags: int = 0, folded: bool = False,
          accept: Callable[[Hit], bool] | None = None, anchored: bool = False, prefilter: str | None = None,
          find: Callable[[re.Pattern[str], str], Iterator[re.Match[str]]] | None = None) -> Rule:
    # ASCII: ``\b``, ``\w`` and ``\s`` mean their ASCII selves, so CJK text next to a cue is a boundary.
    return Rule(name, re.compile(pattern, flags | re.ASCII), gates, folded, accept, anchored,
                re.compile(prefilter, re.ASCII) if prefilter else None, find)


# A token's first part runs to its ".", and a "-eyJ" inside it can start one too (taking less of the same run, then the
# same rest: where the run's first start fails, the others fail). Tried at every "-eyJ" of a long run, the pattern
# took 0.7 s for 32,000 characters, 10 s for 128,000. Each eyJ that can start one, with the rest of its run:
_JWT_START = re.compile(r"eyJ(?<=\beyJ)[A-Za-z0-9_\-]*+", re.ASCII)


def _jwts(pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """What the JWT rule's ``pattern`` finds, tried only where a run's first token can start."""
    end = 0
    for start in _JWT_START.finditer(text):
        if start.start() >= end and (match := pattern.match(text, start.start())) is not None:
            yield match
            end = match.end()


# A URL's scheme runs to its "://", and a letter after "." "+" or "-" inside it can start a match too (taking less
# of the scheme, then the same rest). Tried at every such letter of "a.a.a….a://", the pattern took 2.6 s for
# 32,000 characters, 9 s for 64,000.
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789+.-")
_SCHEME_START = re.compile(r"\b[a-z]", re.ASCII)
# What every match has after its scheme: userinfo, then "@".
_USERINFO = re.compile(r"://(?=[^\s/@\"'<>]*+@)", re.ASCII)


def _url_credentials(pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """What a URL credentials rule's ``pattern`` finds (in lower-cased text), tried only where the scheme before a
    "://" that userinfo follows can first start."""
    end = 0
    for userinfo in _USERINFO.finditer(text):
        scheme = userinfo.start()
        while scheme > 0 and text[scheme - 1] in _SCHEME_CHARS:
            scheme -= 1
        start = _SCHEME_START.search(text, scheme, userinfo.start())
        if start is not None and start.start() >= end and (match := pattern.match(text, start.start())) is not None:
            yield match
            end = match.end()


_PEM_BEGIN = r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
_PEM_END = r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
_PEM_LINES = r"(?:\s*(?:[A-Za-z0-9+/=]+|[A-Za-z-]+: [^\n]*))*"
_PEM_END_RE = re.compile(_PEM_END)
_PEM_CUT_SHORT = re.compile(_PEM_BEGIN + _PEM_LINES, re.S | re.ASCII)


def _pem_blocks(pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """What the private key rule's ``pattern`` finds: a block to the first END line after its BEGIN line, else one
    cut short. After the last place an END line starts only a block cut short can begin, so the END line is not
    looked for there (it was, every BEGIN line read on to the end of the text: 0.4 s for 32,000 characters of BEGIN
    lines, 40 s for 320,000)."""
    last = text.rfind("-----END ")
    while last >= 0 and _PEM_END_RE.match(text, last) is None:
        last = text.rfind("-----END ", 0, last)
    at = 0
    while (match := (pattern if at <= last else _PEM_CUT_SHORT).search(text, at)) is not None:
        yield match
        at = match.end()


RULES: tuple[Rule, ...] = (
    # -- by shape: the whole match is the secret ------------------------------------------------------
    # A block cut short (a clipped message) ends where its base64 lines end, not at the end of the text.
    _rule("pem_private_key", rf"{_PEM_BEGIN}(?:.*?{_PEM_END}|{_PEM_LINES})", ("-----BEGIN ",), flags=re.S,
          find=_pem_blocks),
    # ... and one whose beginning was cut off ends in its END line. Linear in the text: a match starts only where
    # a run of base64 starts (never inside one), and not at a line right after a base64 line (the match that
    # starts on that line takes this one in); what it took it never gives back (no line or character of a
    # chain can be what lets END follow). Without that, a long base64 line, or a wrapped base64 file, near any
    # "-----END " took time quadratic in its length: 2.5 minutes for an 80 KB image beside a certificate.
    _rule("pem_private_key_tail",
          r"(?<![A-Za-z0-9+/=])(?<![A-Za-z0-9+/=]{16}\n)(?<![A-Za-z0-9+/=]{16}\r\n)"
          r"(?:[A-Za-z0-9+/=]{16,}+[ \t]*+\r?\n)++-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----",
          ("-----END ",)),
    _rule("openai_anthropic", r"\bsk-[A-Za-z0-9_\-]{16,}", ("sk-",), accept=_openai_key),
    _rule("stripe", r"\b(?:[sr]k_(?:live|test)_[A-Za-z0-9]{16,}|whsec_[A-Za-z0-9]{24,})",
          ("_live_", "_test_", "whsec_")),
    _rule("github", r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{22,})", _GITHUB),
    _rule("gitlab", r"\bgl(?:pat|dt|rt|ptt|cbt|ft|soat|imt)-[A-Za-z0-9_\-]{20,}", _GITLAB),
    _rule("slack", r"\b(?:xox[abposre]-[A-Za-z0-9\-]{10,}|xapp-\d-[A-Za-z0-9\-]{10,})|"
                   r"https://hooks\.slack\.com/services/[A-Za-z0-9/_\-]+", ("xox", "xapp-", "hooks.slack.com")),
    _rule("aws_access_key_id", r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b", _AWS_KEY_ID),
    _rule("google", r"\b(?:AIza[0-9A-Za-z_\-]{35}|GOCSPX-[A-Za-z0-9_\-]{20,}|ya29\.[0-9A-Za-z_\-]{20,})",
          ("AIza", "GOCSPX-", "ya29.")),
    # Matched from the colon (a literal the regex engine finds fast: the pattern starts with it, the digits
    # before it are a lookbehind after it); the numeric bot id before it is public.
    _rule("telegram_bot_token", r":(?<=[0-9]{6}:)[A-Za-z0-9_\-]{30,}", (":",)),
    _rule("jwt", r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}", ("eyJ",),
          find=_jwts),
    _rule("discord_bot_token", r"\b[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,40}\b", (".",),
          prefilter=r"\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27}"),
    # -- by shape, keeping what names it ----------------------------------------------------------------
    _rule("url_userinfo", r"\b[a-z][a-z0-9+.\-]*://[^\s:/@\"'<>]*:(?P<s>[^\s@/\"'<>]{3,})(?=@)", ("://",),
          folded=True, find=_url_credentials),
    _rule("url_token_userinfo", r"\b[a-z][a-z0-9+.\-]*://(?P<s>[^\s:/@\"'<>]{16,})(?=@)", ("://",), folded=True,
          accept=_credential_value, find=_url_credentials),
    _rule("url_query_secret",
          r"[?&](?:access_token|token|api_?key|apikey|key|secret|client_secret|password|passwd|sig|signature|"
          r"auth|code)=(?P<s>[^\s&#\"'<>]{6,})", ("=",), folded=True, accept=_credential_value),
    _rule("authorization_header",
          rf"authorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|bot|digest|negotiate|apikey|sso-key)\s+)?"
          rf"{_NOT_REDACTED}(?P<s>[^\s\"',;]{{8,}})", ("authorization",), folded=True),
    _rule("bearer", rf"\bbearer\s+{_NOT_REDACTED}(?P<s>[A-Za-z0-9._~+/\-]{{8,}}=*)", ("bearer",), folded=True,
          accept=_credential_value),
    _rule("basic_auth", r"\bbasic\s+(?P<s>[A-Za-z0-9+/]{8,}=*)", ("basic",), folded=True,
          accept=_basic_credentials),
    # -- by context: a secret-like key or cue, then the value ---------------------------------------------
    _rule("key_value",
          rf"(?P<key>{_KEY_NAMES})(?:{_Q}[\"'])?\s*(?::=|[:=]|=>)\s*(?:b?{_Q}[\"'](?P<s1>[^\"'\n\\]{{3,200}}){_Q}[\"']|"
          rf"(?P<s>{_BARE}))",
          _KEY_GATES, folded=True, accept=_keyed_value, anchored=True),
    _rule("cli_flag", rf"(?<![\w-])--(?:{_FLAG_NAMES})(?:=|\s+){_VALUE}", ("--",), folded=True,
          accept=_strong_value),
    _rule("db_client_password",
          rf"(?:{'|'.join(re.escape(c) for c in _DB_CLIENTS)})\b[^\n|;&]{{0,200}}?\s-[pwa]\s*"
          rf"(?P<s>(?!-)[^\s\"'`]{{3,}})", _DB_CLIENTS, folded=True, accept=_db_client_value),
    _rule("curl_user", r"(?<![\w-])(?:-u|--user)\s+[\"']?[^\s:\"']+:(?P<s>[^\s\"'@]{3,})", ("-u", "--user")),
    _rule("login_slash",
          rf"(?P<cue>{_LOGIN_CUES})[^\n/]{{0,40}}?(?:\s|[:：])[\w.@+\-]{{1,64}}\s*/\s*"
          rf"(?P<s>[^\s/\"'`]{{2,}}[^\s/\"'`.,;:!?)])",
          _LOGIN_GATES, folded=True, accept=_login_value, anchored=True),
    _rule("prose_cue", rf"(?P<cue>{_PROSE_CUES})s?{_PROSE_SEP}(?:{_Q}[\"'`“])?(?P<s>{_BARE})", _PROSE_GATES, folded=True,
          accept=_prose_value, anchored=True),
    _rule("chinese_cue", rf"(?:{_ZH_CUES}){_ZH_SEP}[\"'`“「]?{_ASCII_VALUE}", _ZH_GATES, accept=_strong_value,
          anchored=True),
    _rule("random_after_cue",
          rf"(?P<cue>{'|'.join(_RANDOM_CUES)})s?"
          r"(?![a-z0-9+/])[^\n]{0,40}?(?<![A-Za-z0-9+/=_\-.:@%])(?P<s>[A-Za-z0-9+/=_\-]{20,})",
          _RANDOM_CUES, folded=True, accept=_random_after_cue, anchored=True),
)
