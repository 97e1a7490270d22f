"""Points discord.py at a fake Discord in every Python process started with this directory on PYTHONPATH.

Python imports ``sitecustomize`` at start-up, so a real ``concord run`` worker (`bench.cluster`) connects to
the fake named by ``FAKE_DISCORD_URL`` (``http://127.0.0.1:PORT``) with nothing in Concord changed: the same
two process-wide URLs `tests.fakes.discord_server.FakeDiscord.patch_client_urls` sets inside pytest.
"""

import os

_url = os.environ.get("FAKE_DISCORD_URL")
if _url:
    import discord
    import yarl

    discord.http.Route.BASE = f"{_url}/api/v10"
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(f"{_url.replace('http', 'ws', 1)}/")
