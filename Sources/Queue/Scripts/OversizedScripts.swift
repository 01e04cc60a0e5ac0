/// The Lua that buries a payload over the fetch size limit (issue 51, review L7): `Scripts.fetch` measures each
/// payload it takes (`#raw`, O(1) in Lua) and sends one over the limit to `dead` as a stub in the same atomic call
/// that takes it off its queue, so it is never in an in-flight list, never in the fetch's reply, and never lost.
///
/// The stub (`OversizedJob`'s shape, which the Swift side builds the same way for a payload a blocking wait brought)
/// is a JSON object: `retry` false, `queue` (the queue it was fetched from), `class` and `jid` when found (else
/// `BadPayload` and a jid made from the payload's ends), `error_class` `PayloadTooLarge`, `error_message` with size
/// and limit, `failed_at`, `retry_count` 0, `payload_bytes`, `payload_head` (the first 1,024 bytes, made valid
/// UTF-8) and no `args`: the admin's retry refuses it as not a job, Ruby's client would too.
///
/// The payload is not decoded (a hostile one may not be JSON, or may be 512 MB of it): `class`, `jid` and `bid` are
/// read by a bounded pattern over its first and last 4,096 bytes, and kept only when made of 1…128 (class: 256)
/// printable ASCII characters. Needs `BatchScripts.functions` (`batch_count`) and `UniqueScripts.releaseFunction`
/// (`releaseUnique`) before it, and the keys `keys` names.
enum OversizedScripts {
    /// The keys `functions` names (with `BatchScripts.keys`' and `releaseUnique`'s).
    static let keys = BatchScripts.keys.dead.uniqueOwnerKey

    static let functions = #"""
        local function oversized_field(head, tail, key, longest)
          local pattern = '"' .. key .. '"%s*:%s*"([^"\\]*)"'
          local value = string.match(head, pattern) or string.match(tail, pattern)
          if value and #value >= 1 and #value <= longest and not string.find(value, '[^!-~]') then return value end
          return nil
        end
        -- Valid UTF-8: each ill-formed sequence (its maximal subpart) becomes one U+FFFD, as Swift's
        -- String(decoding:as: UTF8.self) does.
        local function utf8_clean(s)
          if not string.find(s, '[\128-\255]') then return s end
          local out, n, i = {}, #s, 1
          while i <= n do
            local c = string.byte(s, i)
            if c < 128 then
              local j = string.find(s, '[\128-\255]', i) or (n + 1)
              out[#out + 1] = string.sub(s, i, j - 1)
              i = j
            else
              local need, lo, hi = -1, 128, 191
              if c >= 194 and c <= 223 then need = 1
              elseif c == 224 then need, lo = 2, 160
              elseif (c >= 225 and c <= 236) or c == 238 or c == 239 then need = 2
              elseif c == 237 then need, hi = 2, 159
              elseif c == 240 then need, lo = 3, 144
              elseif c >= 241 and c <= 243 then need = 3
              elseif c == 244 then need, hi = 3, 143 end
              local j, ok = i + 1, need > 0
              for k = 1, need do
                local d = string.byte(s, j)
                local l, h = 128, 191
                if k == 1 then l, h = lo, hi end
                if not d or d < l or d > h then ok = false break end
                j = j + 1
              end
              if ok then out[#out + 1] = string.sub(s, i, j - 1) else out[#out + 1] = '\239\191\189' end
              i = j
            end
          end
          return table.concat(out)
        end
        -- ZADDs the stub of `raw` (fetched from `queue`, over `limit` bytes) to dead at `now`, releases the unique
        -- lock its jid owns and counts it dead for its batch. `seq` tells apart stubs made in one call. Returns
        -- the stub's jid.
        local function oversized_bury(raw, queue, limit, now, seq)
          local size = #raw
          local head, tail = string.sub(raw, 1, 4096), string.sub(raw, -4096)
          local jid = oversized_field(head, tail, 'jid', 128)
          local class = oversized_field(head, tail, 'class', 256)
          local bid = oversized_field(head, tail, 'bid', 128)
          local stub = {
            ['retry'] = false, ['queue'] = queue, ['class'] = class or 'BadPayload',
            ['jid'] = jid or string.sub(redis.sha1hex(now .. ':' .. seq .. ':' .. size .. ':' .. head .. tail), 1, 24),
            ['error_class'] = 'PayloadTooLarge',
            ['error_message'] = 'payload of ' .. size .. ' bytes is over the fetch limit of ' .. limit ..
              ' bytes: not run; its first 1024 bytes are in payload_head',
            ['failed_at'] = tonumber(now), ['retry_count'] = 0, ['payload_bytes'] = size,
            ['payload_head'] = utf8_clean(string.sub(raw, 1, 1024)),
          }
          redis.call('ZADD', DEAD, now, cjson.encode(stub))
          if jid then
            releaseUnique(jid)
            if bid then batch_count(bid, jid, 'dead', now) end
          end
          return stub['jid']
        end
        """#
}
