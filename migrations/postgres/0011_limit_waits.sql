-- Turns that wait out a rate limit: whether the conversation continues by itself after one
-- (`auto_continue`; NULL follows the server's default), when its "continue" turn is due
-- (milliseconds since the epoch; NULL when it waits for nothing) and how many rate-limited
-- turns in a row it has waited out (the back-off and the cap on tries count them).
alter table session_info add column auto_continue boolean;
alter table session_info add column limit_wait_until_ms bigint;
alter table session_info add column limit_tries bigint not null default 0;
create index session_info_limit_waits on session_info (limit_wait_until_ms)
    where limit_wait_until_ms is not null;
