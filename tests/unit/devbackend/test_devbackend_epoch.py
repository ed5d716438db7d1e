"""The reference backend's epoch: the identity of its command store (docs/protocol.md, Epoch)."""

from __future__ import annotations

import shutil

from faden_agent.devbackend.store import Store


def reopen(path):
    return Store(path)


def test_epoch_is_kept_across_restarts_and_changes_when_the_database_goes_back(tmp_path):
    data = tmp_path / "data"
    store = Store(data)
    store.add_command("n1", "container.start", {}, None, None)
    first = store.epoch
    store.close()
    backup = tmp_path / "backup"
    shutil.copytree(data, backup)

    store = reopen(data)
    assert store.epoch == first  # a plain restart: same store, same cursor space
    store.add_command("n1", "container.start", {}, None, None)
    store.close()

    for path in data.glob("backend.sqlite*"):  # the restore: the database put back, nothing else
        path.unlink()
    for path in backup.glob("backend.sqlite*"):
        shutil.copy2(path, data / path.name)
    store = reopen(data)
    restored = store.epoch
    assert restored != first  # its sequence numbers will be handed out again
    assert store.add_command("n1", "container.start", {}, None, None)["seq"] == 2
    store.close()
    assert reopen(data).epoch == restored  # and the new epoch is kept from then on


def test_a_replaced_database_has_its_own_epoch(tmp_path):
    one, two = Store(tmp_path / "one"), Store(tmp_path / "two")
    assert one.epoch != two.epoch and len(one.epoch) == 16
