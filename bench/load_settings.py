"""Settings of the load benchmark's server (``bench/load.py``): the example project's, with
``bench.load_urls`` as the URLconf (the project's URLs plus one plain DRF endpoint)."""

from project.settings import *  # noqa: F403

ROOT_URLCONF = "bench.load_urls"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
