"""Audit triggers for the fault suite: a trail of every fenced write, by the database.

Installed on the test database for one scenario, removed after. They change
nothing the service writes; they only copy, at the moment of each write:

- ``faults_read``: every job a poller read and recorded in flight (one row per id
  of each ``scheduling_inflightbatch`` insert), with the shard, epoch and owner;
- ``faults_job_write``: a pending row's one write by a poller (a status, attempt or
  due-time change: delivered, dead, expired, retried or deferred), with the writer
  (its connection's ``application_name``, ``faults-<poller>``) and the write's
  ``now`` (``updated_at``). A retry whose new bucket lies in another partition is,
  at the partition level, a DELETE from the old one and an INSERT into the new one
  (row movement): PostgreSQL then fires the AFTER DELETE and AFTER INSERT row
  triggers, never AFTER UPDATE. So a pending row's DELETE by a poller is kept in
  ``faults_job_moved_out`` and the INSERT of the same id in the same transaction
  completes it into ``faults_job_write`` (``moved`` = true) if it changed the job;
- ``faults_lease``: every lease acquisition (epoch change) with its ``acquired_at``;
- ``faults_checkpoint``: every checkpoint change, old and new, and how many
  pending rows of that shard lay in the buckets it passed, as the database saw
  them right then.
"""

from __future__ import annotations

from django.db import connection

INSTALL_SQL = """
DROP TABLE IF EXISTS faults_read, faults_job_write, faults_job_moved_out, faults_lease,
    faults_checkpoint;
CREATE TABLE faults_read (
    job_id uuid, shard int, epoch bigint, owner text, at timestamptz DEFAULT clock_timestamp());
CREATE INDEX ON faults_read (job_id);
CREATE TABLE faults_job_write (
    job_id uuid, shard int, writer text, new_status text,
    written_at timestamptz, moved boolean DEFAULT false,
    at timestamptz DEFAULT clock_timestamp());
CREATE TABLE faults_job_moved_out (
    job_id uuid, shard int, attempts int, due_at timestamptz, writer text, xact xid8);
CREATE INDEX ON faults_job_moved_out (job_id);
CREATE TABLE faults_lease (
    shard int, epoch bigint, owner text, acquired_at timestamptz,
    at timestamptz DEFAULT clock_timestamp());
CREATE TABLE faults_checkpoint (
    shard int, old timestamptz, new timestamptz, passed int,
    at timestamptz DEFAULT clock_timestamp());

CREATE OR REPLACE FUNCTION faults_writer() RETURNS text AS $$
  SELECT CASE WHEN current_setting('application_name') LIKE 'faults-p%'
    THEN substr(current_setting('application_name'), 8) END
$$ LANGUAGE sql STABLE;

CREATE OR REPLACE FUNCTION faults_read_fn() RETURNS trigger AS $$
BEGIN
  INSERT INTO faults_read (job_id, shard, epoch, owner)
  SELECT uuid(value), NEW.shard, NEW.epoch, NEW.owner
  FROM unnest(string_to_array(NEW.job_ids, ',')) AS value;
  RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE OR REPLACE TRIGGER faults_read_trg AFTER INSERT ON scheduling_inflightbatch FOR EACH ROW
  EXECUTE FUNCTION faults_read_fn();

CREATE OR REPLACE FUNCTION faults_job_write_fn() RETURNS trigger AS $$
BEGIN
  IF faults_writer() IS NOT NULL THEN
    INSERT INTO faults_job_write (job_id, shard, writer, new_status, written_at)
    VALUES (OLD.id, OLD.shard, faults_writer(), NEW.status, NEW.updated_at);
  END IF;
  RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE OR REPLACE TRIGGER faults_job_write_trg AFTER UPDATE ON scheduling_job FOR EACH ROW
  WHEN (OLD.status = 'pending' AND (NEW.status <> 'pending' OR NEW.attempts <> OLD.attempts
        OR NEW.due_at <> OLD.due_at))
  EXECUTE FUNCTION faults_job_write_fn();

-- Row movement: AFTER triggers fire in the order their events were queued, so a
-- row's DELETE (old partition) is recorded before its INSERT (new partition) looks.
CREATE OR REPLACE FUNCTION faults_job_moved_out_fn() RETURNS trigger AS $$
BEGIN
  IF faults_writer() IS NOT NULL THEN
    INSERT INTO faults_job_moved_out (job_id, shard, attempts, due_at, writer, xact)
    VALUES (OLD.id, OLD.shard, OLD.attempts, OLD.due_at, faults_writer(), pg_current_xact_id());
  END IF;
  RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE OR REPLACE TRIGGER faults_job_moved_out_trg AFTER DELETE ON scheduling_job FOR EACH ROW
  WHEN (OLD.status = 'pending') EXECUTE FUNCTION faults_job_moved_out_fn();

CREATE OR REPLACE FUNCTION faults_job_moved_in_fn() RETURNS trigger AS $$
BEGIN
  INSERT INTO faults_job_write (job_id, shard, writer, new_status, written_at, moved)
  SELECT o.job_id, o.shard, o.writer, NEW.status, NEW.updated_at, true
  FROM faults_job_moved_out o WHERE o.job_id = NEW.id AND o.xact = pg_current_xact_id()
    AND (NEW.status <> 'pending' OR NEW.attempts <> o.attempts OR NEW.due_at <> o.due_at);
  DELETE FROM faults_job_moved_out o WHERE o.job_id = NEW.id AND o.xact = pg_current_xact_id();
  RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE OR REPLACE TRIGGER faults_job_moved_in_trg AFTER INSERT ON scheduling_job FOR EACH ROW
  EXECUTE FUNCTION faults_job_moved_in_fn();

CREATE OR REPLACE FUNCTION faults_lease_fn() RETURNS trigger AS $$
BEGIN
  INSERT INTO faults_lease (shard, epoch, owner, acquired_at)
  VALUES (NEW.shard, NEW.epoch, NEW.owner, NEW.acquired_at);
  RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE OR REPLACE TRIGGER faults_lease_trg AFTER UPDATE ON polling_shardlease FOR EACH ROW
  WHEN (NEW.epoch IS DISTINCT FROM OLD.epoch) EXECUTE FUNCTION faults_lease_fn();

CREATE OR REPLACE FUNCTION faults_checkpoint_fn() RETURNS trigger AS $$
BEGIN
  INSERT INTO faults_checkpoint (shard, old, new, passed)
  SELECT NEW.shard, OLD.last_drained, NEW.last_drained, count(*)
  FROM scheduling_job j
  WHERE j.shard = NEW.shard AND j.status = 'pending'
    AND j.bucket <= NEW.last_drained
    AND (OLD.last_drained IS NULL OR j.bucket > OLD.last_drained);
  RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE OR REPLACE TRIGGER faults_checkpoint_trg AFTER UPDATE ON polling_shardcheckpoint FOR EACH ROW
  WHEN (NEW.last_drained IS DISTINCT FROM OLD.last_drained)
  EXECUTE FUNCTION faults_checkpoint_fn();
"""

UNINSTALL_SQL = """
DROP TRIGGER IF EXISTS faults_read_trg ON scheduling_inflightbatch;
DROP TRIGGER IF EXISTS faults_job_write_trg ON scheduling_job;
DROP TRIGGER IF EXISTS faults_job_moved_out_trg ON scheduling_job;
DROP TRIGGER IF EXISTS faults_job_moved_in_trg ON scheduling_job;
DROP TRIGGER IF EXISTS faults_lease_trg ON polling_shardlease;
DROP TRIGGER IF EXISTS faults_checkpoint_trg ON polling_shardcheckpoint;
DROP FUNCTION IF EXISTS faults_read_fn(), faults_job_write_fn(), faults_job_moved_out_fn(),
    faults_job_moved_in_fn(), faults_lease_fn(), faults_checkpoint_fn(), faults_writer();
DROP TABLE IF EXISTS faults_read, faults_job_write, faults_job_moved_out, faults_lease,
    faults_checkpoint;
"""


def audit_install() -> None:
    with connection.cursor() as cursor:
        cursor.execute(INSTALL_SQL)


def audit_uninstall() -> None:
    with connection.cursor() as cursor:
        cursor.execute(UNINSTALL_SQL)
