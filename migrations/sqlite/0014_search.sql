-- The search index: the words of each user and assistant message's text (`words`) and of each
-- title (`title_words`), as `src/store/words.rs` makes them (distinct, sorted, joined by single
-- spaces), stored with the row they belong to, and indexed by FTS5 tables that keep no copy of
-- them, whose row ids are the message's `id` and the conversation's. Whoever stores words adds
-- their index row in the same transaction (the writer, a fork's copies, a rename); these
-- triggers delete it with the row, whatever deletes that (a rewind, a deleted conversation, a
-- discarded import). A search looks the words up in the index, or reads the `words` of the
-- principal's newest conversations when that finds a page sooner.
alter table messages add column words text;
alter table session_info add column title_words text;

create virtual table message_words_index using fts5(
    words, content = '', contentless_delete = 1, detail = none, tokenize = 'ascii'
);
create virtual table title_words_index using fts5(
    title_words, content = '', contentless_delete = 1, detail = none, tokenize = 'ascii'
);

create trigger message_words_removed after delete on messages when old.words is not null
begin
    delete from message_words_index where rowid = old.id;
end;
create trigger title_words_removed after delete on session_info
when old.title_words is not null
begin
    delete from title_words_index where rowid = old.id;
end;

-- A store written before this migration: at its next start the server fills in the words of
-- its messages and titles (a chunk per transaction, logging its progress), then deletes this
-- row. Nothing else is written meanwhile: the start waits for it.
create table search_backfill (pending integer primary key);
insert into search_backfill (pending) select 1 where exists (select 1 from session_info);
