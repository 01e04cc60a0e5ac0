# A no-op Sidekiq worker for the comparison in bench/throughput.sh, plus a server middleware that records each job's
# pickup latency (start of perform - enqueued_at) in the Redis list bench:pickup when BENCH_PICKUP=1.
require "sidekiq"
# redis-rb 4.8 warns on every BRPOP Sidekiq 6.4.1 makes; silence it so logging does not slow Sidekiq down.
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
Sidekiq.logger.level = Logger::WARN

class PickupRecorder
  def call(_worker, job, _queue)
    latency = Time.now.to_f - job["enqueued_at"].to_f
    Sidekiq.redis { |c| c.rpush("bench:pickup", latency) }
    yield
  end
end

if ENV["BENCH_PICKUP"] == "1"
  Sidekiq.configure_server do |config|
    config.server_middleware { |chain| chain.add PickupRecorder }
  end
end

class Noop
  include Sidekiq::Worker
  def perform(*) end
end
