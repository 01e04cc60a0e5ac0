-- Days whose nightly ad revenue run finished: the run fans out one AdRevenueAggregationJob per app as a batch
-- (docs/batches.md), and the batch's on_success callback (AdRevenueDayCompleteJob) writes the day's row here, in
-- the same transaction as its ledger row. AdRevenueDayCheckJob raises an alert each morning for a day without one.
CREATE TABLE ad_revenue_days (
    day          date PRIMARY KEY,
    bid          text NOT NULL,
    apps         integer NOT NULL CHECK (apps >= 0),
    completed_at timestamptz NOT NULL DEFAULT now()
);
