-- What each conversation's turns cost, summed on its own row as the ledger (`turn_usage`)
-- gets each turn, for the conversation's own cap. It replaces the ledger's index by
-- conversation: that index, keyed by a random id, took one scattered page per turn in every
-- commit, while the conversation's row is written by the same commit anyway.
alter table session_info add column spent_usd real not null default 0;
update session_info set spent_usd = coalesce(
    (select sum(cost_usd) from turn_usage where turn_usage.session_id = session_info.session_id),
    0);
drop index turn_usage_by_session;
