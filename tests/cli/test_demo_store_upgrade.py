"""``jobcast demo`` reuses its own scratch store: one an older jobcast left (schema 0004,
before the whole-job index) is migrated for the demo, never refused; a user's store is
never migrated implicitly (tests/ingest/test_store_migrations.py)."""

from __future__ import annotations

import sqlalchemy as sa

from ingest import migrations
from ingest.store import Store, make_engine
from jobcast.cli.demo import _upgrade_own_store


def test_the_demo_upgrades_its_own_older_store(tmp_path):
    url = f"sqlite:///{tmp_path / 'jobcast.db'}"
    Store(url).engine.dispose()
    engine = make_engine(url)
    with engine.begin() as conn:  # the store as jobcast at schema 0004 left it
        conn.execute(sa.text("DROP TABLE whole_jobs"))
        conn.execute(sa.text(f"UPDATE {migrations.VERSION_TABLE} SET version_num = '0004'"))
    assert migrations.state(engine).status == "outdated"
    _upgrade_own_store(url)
    assert migrations.state(engine).status == "current"
    assert "whole_jobs" in sa.inspect(engine).get_table_names()
    engine.dispose()
    Store(url).engine.dispose()  # opens
