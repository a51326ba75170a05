-- 1 while an import is still storing the conversation's messages: nobody sees it, and it is
-- deleted if the import fails (or at the next start, after a crash). Set to 0 once every
-- message is stored.
alter table session_info add column pending integer not null default 0;
