-- The search index: the words of each user and assistant message's text (`words`) and of each
-- title (`title_words`), as `src/store/words.rs` makes them (distinct, sorted, joined by single
-- spaces), stored with the row they belong to, in the same statement, and indexed by FTS5 tables
-- that keep no copy of them (external content). The triggers keep each index exact whatever
-- writes or deletes the rows: the writer, a rewind, a fork's copies, a rename, a deleted
-- conversation, a discarded import. A search looks the words up in the index, or reads the
-- `words` of the principal's newest conversations when that finds a page sooner.
alter table messages add column words text;
alter table session_info add column title_words text;

create virtual table message_words_index using fts5(
    words, content = 'messages', content_rowid = 'id', detail = none, tokenize = 'ascii'
);
create virtual table title_words_index using fts5(
    title_words, content = 'session_info', content_rowid = 'id', detail = none,
    tokenize = 'ascii'
);

create trigger message_words_added after insert on messages when new.words is not null
begin
    insert into message_words_index (rowid, words) values (new.id, new.words);
end;
create trigger message_words_removed after delete on messages when old.words is not null
begin
    insert into message_words_index (message_words_index, rowid, words)
    values ('delete', old.id, old.words);
end;
create trigger message_words_changed after update of words on messages
when old.words is not new.words
begin
    insert into message_words_index (message_words_index, rowid, words)
    select 'delete', old.id, old.words where old.words is not null;
    insert into message_words_index (rowid, words)
    select new.id, new.words where new.words is not null;
end;

create trigger title_words_added after insert on session_info when new.title_words is not null
begin
    insert into title_words_index (rowid, title_words) values (new.id, new.title_words);
end;
create trigger title_words_removed after delete on session_info when old.title_words is not null
begin
    insert into title_words_index (title_words_index, rowid, title_words)
    values ('delete', old.id, old.title_words);
end;
create trigger title_words_changed after update of title_words on session_info
when old.title_words is not new.title_words
begin
    insert into title_words_index (title_words_index, rowid, title_words)
    select 'delete', old.id, old.title_words where old.title_words is not null;
    insert into title_words_index (rowid, title_words)
    select new.id, new.title_words where new.title_words is not null;
end;

-- A store written before this migration: at its next start the server fills in the words of
-- its messages and titles (a chunk per transaction, logging its progress), then deletes this
-- row. Nothing else is written meanwhile: the start waits for it.
create table search_backfill (pending integer primary key);
insert into search_backfill (pending) select 1 where exists (select 1 from session_info);
