-- The search index: the words of each user and assistant message's text (`words`) and of each
-- title (`title_words`), as `src/store/words.rs` makes them, taken as lexemes as they are
-- (`array_to_tsvector`, no parser or dictionary), with a GIN index each. The server writes them
-- with the row they belong to, in the same statement, so that a rewind, a fork or a delete
-- keeps or drops them with it. A search looks the words up in the indexes, or reads the words
-- of the principal's newest conversations when that finds a page sooner.
alter table messages add column words tsvector;
alter table session_info add column title_words tsvector;
create index messages_by_words on messages using gin (words);
create index session_info_by_title_words on session_info using gin (title_words);

-- A store written before this migration: at its next start a node fills in the words of its
-- messages and titles (a chunk per transaction, logging its progress, holding an advisory lock
-- so that one node does it), then deletes this row.
create table search_backfill (pending boolean primary key);
insert into search_backfill (pending)
select true where exists (select 1 from session_info);
