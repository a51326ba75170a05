-- The user `seq` of the turn running now, set in the write that starts it and cleared in the
-- write of its `result`: after a crash, the next start closes exactly that turn. Prompts that
-- never ran (queued when the server died, imported, or kept by a rewind or fork) stay as they
-- are. NULL: no turn is running.
alter table session_info add column running_seq integer;

-- Databases of earlier versions knew only counts: a conversation whose last prompt has no
-- result after it may have been running when the server stopped, so it is closed once.
update session_info set running_seq = (
    select max(seq) from messages m where m.session_pk = session_info.id and m.prompt = 1
)
where prompt_count > result_count
  and not exists (
    select 1 from messages r
    where r.session_pk = session_info.id and r.message_type = 'result'
      and r.seq > (select max(seq) from messages m where m.session_pk = session_info.id and m.prompt = 1)
  );
