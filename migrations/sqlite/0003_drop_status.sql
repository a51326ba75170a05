-- A conversation's activity (busy, idle, dormant) lives in memory, not in the store: the
-- column only ever held 'idle'.
alter table session_info drop column status;
