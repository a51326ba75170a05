-- The schedule whose `mode: "new"` run started a conversation (null for every other one: a
-- fork or an import does not copy it), and an index by (principal, created_at), so that a
-- principal's new runs of the last hour are counted from its latest conversations alone.
alter table session_info add column schedule_id text;
create index session_info_by_creation on session_info (principal, created_at);
