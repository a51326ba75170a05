-- Each result's own cost (the agent reports a running total per process), so that every
-- client sees what a turn cost, live and in a replay alike.
alter table messages add column turn_cost_usd real;
