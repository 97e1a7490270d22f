"""The labelled redaction corpus: planted secrets (16 kinds × their phrasings) and lines that must survive.

Positives are built from seeded random secrets, so every run sees the same lines and no real credential is
stored in the repository. A vendor-shaped secret is planted in every phrasing, bare mentions included; a
secret only its context gives away (a chosen password, an AWS secret key, an opaque token) only in phrasings
that carry such a context. Negatives are hand-picked hard cases (prose about passwords and tokens, git
output, hashes, UUIDs, paths, base64 images, code, configuration without secrets) in English and Chinese.

Used by ``bench/redaction.py`` (recall and false-positive rate), the redaction tests and the planted-secret
campaign test.
"""

from __future__ import annotations

import base64
import random
import string
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["KINDS", "NEGATIVES", "PHRASINGS", "Planted", "negatives", "planted_secrets", "positives"]

_ALNUM = string.ascii_letters + string.digits


@dataclass(frozen=True, slots=True)
class Planted:
    """One positive line: ``text`` carries ``secret`` of ``kind`` in ``phrasing``."""

    kind: str
    phrasing: str
    secret: str
    text: str


def _chars(rng: random.Random, n: int, alphabet: str = _ALNUM) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _password(rng: random.Random) -> str:
    words = ["sunset", "Orchid", "maple", "Falcon", "river", "Copper", "tiger", "Nimbus", "quartz", "Harbor"]
    shapes = [
        lambda: f"{rng.choice(words)}{rng.randint(10, 9999)}{rng.choice('!#$%&*?@')}",
        lambda: _chars(rng, rng.randint(10, 16), _ALNUM + "!#$%&*@^"),
        lambda: f"{rng.choice(words).lower()}{rng.randint(100, 999)}",
        lambda: f"{rng.choice(words).capitalize()}-{rng.choice(words).capitalize()}-{rng.randint(1, 99)}",
    ]
    return rng.choice(shapes)()


def _pem(rng: random.Random) -> str:
    body = "\n".join(base64.b64encode(rng.randbytes(48)).decode() for _ in range(4))
    return f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"


def _jwt(rng: random.Random) -> str:
    def part(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    header = part(b'{"alg":"HS256","typ":"JWT"}')
    payload = part(f'{{"sub":"{rng.randint(1, 10**9)}","exp":{rng.randint(10**9, 2 * 10**9)}}}'.encode())
    return f"{header}.{payload}.{part(rng.randbytes(32))}"


def _discord(rng: random.Random) -> str:
    user = base64.b64encode(str(rng.randint(10**17, 10**18 * 2)).encode()).decode().rstrip("=")
    return f"{user}.{_chars(rng, 6, _ALNUM + '-_')}.{_chars(rng, 38, _ALNUM + '-_')}"


# kind -> (generator, whether its shape alone gives it away)
KINDS: dict[str, tuple[Callable[[random.Random], str], bool]] = {
    "openai": (lambda r: "sk-proj-" + _chars(r, 48), True),
    "anthropic": (lambda r: "sk-ant-api03-" + _chars(r, 80, _ALNUM + "-_") + "AA", True),
    "github": (lambda r: r.choice(["ghp_", "gho_", "ghs_"]) + _chars(r, 36), True),
    "gitlab": (lambda r: "glpat-" + _chars(r, 20, _ALNUM + "-_"), True),
    "slack": (lambda r: f"xoxb-{r.randint(10**11, 10**12)}-{r.randint(10**11, 10**12)}-{_chars(r, 24)}", True),
    "stripe_live": (lambda r: "sk_live_" + _chars(r, 24), True),
    "stripe_test": (lambda r: r.choice(["sk_test_", "rk_test_"]) + _chars(r, 24), True),
    "aws_access_key_id": (lambda r: "AKIA" + _chars(r, 16, string.ascii_uppercase + string.digits), True),
    "aws_secret_key": (lambda r: _chars(r, 40, _ALNUM + "/+"), False),
    "google_api_key": (lambda r: "AIza" + _chars(r, 35, _ALNUM + "-_"), True),
    "telegram_bot_token": (lambda r: f"{r.randint(10**8, 10**10)}:AA{_chars(r, 33, _ALNUM + '-_')}", True),
    "discord_bot_token": (_discord, True),
    "jwt": (_jwt, True),
    "pem_private_key": (_pem, True),
    "password": (_password, False),
    "opaque_token": (lambda r: _chars(r, 32, string.hexdigits.lower()[:16] + "ABCDEFGHJKMNPQRSTVWXYZ"), False),
}

# name -> (template, carries a context cue). ``{s}`` is the secret.
PHRASINGS: dict[str, tuple[str, bool]] = {
    "bare": ("ok here it is: {s}", False),
    "inline_prose": ("I pasted {s} into the config and restarted the service", False),
    "password_is": ("my password is {s}", True),
    "password_was": ("the old password was {s} before I reset it", True),
    "password_colon": ("Password: {s}", True),
    "passwd": ("passwd {s}", True),
    "pwd_eq": ("pwd={s}", True),
    "login_slash": ("login with user admin / {s}", True),
    "secret_key_is": ("my AWS secret key is {s}", True),
    "token_is": ("the token is {s} — keep it private", True),
    "api_key_json": ('{{"api_key": "{s}", "region": "eu-west-1"}}', True),
    "env_export": ("export SERVICE_TOKEN={s}", True),
    "yaml_secret": ("  client_secret: {s}", True),
    "auth_header": ("curl -H 'Authorization: Bearer {s}' https://api.example.com/v1/items", True),
    "psql_w": ("psql -h db.internal -U app -W {s} appdb", True),
    "mysql_p": ("mysql -u root -p{s} shop < dump.sql", True),
    "cli_password": ("docker login registry.example.com -u ci --password {s}", True),
    "conn_string": ("DATABASE_URL=postgresql://app:{s}@db.internal:5432/app", True),
    "tool_args": ('{{"command": "deploy", "env": {{"DEPLOY_KEY": "{s}"}}}}', True),
    "zh_password": ("我的密码是{s}，别告诉别人", True),
    "zh_colon": ("数据库密码：{s}", True),
    "zh_secret_key": ("这是生产环境的密钥 {s} 请保存好", True),
    "zh_token": ("机器人令牌为 {s}", True),
    "zh_kouling": ("口令是 {s}", True),
}

NEGATIVES: tuple[str, ...] = (
    # prose about credentials, with no credential in it
    "The password policy requires at least 12 characters and one digit.",
    "Reset your password at https://example.com/account/settings if you forgot it.",
    "the token budget is 2,000 and the password is strict about length",
    "The key insight is that the cache is keyed by session id.",
    "API keys are rotated every 90 days; the secret manager handles it.",
    "my password is correct, but the login still fails with 401",
    "The token was expired, so I generated a new one in the dashboard.",
    "Do not paste your secret key into the chat, use the vault instead.",
    "Password: required for every account created after March.",
    "If login fails, check the username/password pair in the LDAP admin panel.",
    "we log in with SSO / SAML now",
    "我忘记密码了，怎么重置？",
    "请输入密码后再试一次。",
    "密钥已经轮换过了，旧的不能用了。",
    "令牌过期了，需要重新登录。",
    "口令太短，至少需要十二位。",
    "Bearer tokens must be sent in the Authorization header.",
    "Use basic authentication only over TLS.",
    "The tokenizer splits the text into tokens; max_tokens=4096 caps the output.",
    "sk-learn is not a package name, scikit-learn is.",
    # git output and hashes
    "commit 3f2a9c0e1b7d4a5f6e8c9b0a1d2e3f4a5b6c7d8e",
    "Author: Jane Doe <jane@example.com>",
    "index 3f2a9c0..8b1d2e4 100644",
    "9fceb02 Fix token counting for tool calls",
    "Merge pull request #1234 from org/feature/password-reset-flow",
    "sha256:4e07408562bedb8b60ce05c1decfe3ad16b72230967de01f640b7e4729b49fce  concord-0.4.tar.gz",
    "d41d8cd98f00b204e9800998ecf8427e  empty.txt",
    "HEAD is now at 1a2b3c4 Add key rotation docs",
    # UUIDs, ids, paths
    "request id 123e4567-e89b-12d3-a456-426614174000 took 230 ms",
    "session 7c9e6679-7425-40de-944b-e07fc1f90ae7 compressed 3 times",
    "/home/deploy/.ssh/id_ed25519.pub",
    "C:\\Users\\Admin\\AppData\\Local\\Concord\\keys\\README.txt",
    "/var/lib/concord/data/memory/users/telegram-123456789/USER.md",
    "src/auth/password_reset/views.py:42: def reset_password(request, token):",
    "Saved to ./secrets/.gitignore (the directory holds no secrets)",
    # code and configuration without secrets
    "def get_token(self) -> str: return self._token",
    "token = tokenizer.encode(text)",
    "password_hash = bcrypt.hashpw(password.encode(), bcrypt.gensalt())",
    "for key, value in settings.items(): print(key, value)",
    '{"key": "value", "primary_key": "id", "sort_key": "created_at"}',
    '{"max_tokens": 4096, "temperature": 0.2, "token_count": 12345}',
    "api_key = os.environ['OPENAI_API_KEY']",
    "password: ${DB_PASSWORD}",
    "CONCORD_LLM__API_KEY=",
    "secret: true",
    "auth: required",
    "https://example.com/search?q=redis+locks&page=2&sort=asc",
    "redis://127.0.0.1:6379/0",
    "postgresql+asyncpg://postgres@127.0.0.1:5432/test",
    "ssh -p 2222 deploy@host.example.com",
    "mkdir -p /srv/app/logs && docker run -p 8080:80 nginx",
    "psql -h localhost -U postgres -d test -c 'select 1'",
    "python -m pytest -p no:cacheprovider -q tests/",
    "grep -rn 'password' src/ | wc -l",
    "12:30:45 INFO gateway: adapter telegram started",
    "Tue Dec  1 11:43:48 UTC 2026",
    "pip install pyjwt==2.8.0 cryptography>=41",
    "The Telegram bot id is 123456789 and its name is concord_bot.",
    "version 1.2.3-beta.4+build.5678",
)


def _base64_image(rng: random.Random, size: int) -> str:
    return "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + rng.randbytes(size)).decode()


def negatives(seed: int = 7, images: int = 20) -> list[str]:
    """The hand-picked negatives plus ``images`` base64 images of 1–24 KB."""
    rng = random.Random(seed)
    return [*NEGATIVES, *(_base64_image(rng, rng.randint(1_000, 24_000)) for _ in range(images))]


def planted_secrets(seed: int = 13, per_kind: int = 3) -> list[tuple[str, str]]:
    """``per_kind`` seeded secrets of every kind, as (kind, secret)."""
    rng = random.Random(seed)
    return [(kind, make(rng)) for kind, (make, _) in KINDS.items() for _ in range(per_kind)]


def positives(seed: int = 13, per_kind: int = 3) -> list[Planted]:
    """Every secret in every phrasing that can carry it (context-only kinds need a cue in the phrasing)."""
    lines = []
    for kind, secret in planted_secrets(seed, per_kind):
        by_shape = KINDS[kind][1]
        for name, (template, cued) in PHRASINGS.items():
            if by_shape or cued:
                lines.append(Planted(kind, name, secret, template.format(s=secret)))
    return lines
