#!/usr/bin/env python3
"""Static SASS counts by basic block. Input: `nvdisasm -c x.cubin` output (nvrtc_dump.cc writes the cubin).

  sass_blocks.py X.sass KEY [LO HI]            one line per basic block of the function whose name contains KEY
                                               (addresses LO..HI, hex): instructions by class, the block's last one
  sass_blocks.py X.sass KEY LO HI --hot [cold=A,B,..] [rows=A,B,..]
                                               per-class sum of the blocks in [LO, HI) (one loop iteration) minus
                                               the `cold` blocks (paths a full, unchecked item does not take); the
                                               `rows` blocks (only some warps run them) are summed apart
  sass_blocks.py X.sass KEY --loop [cold=A,B,..] [nozfill]
                                               the same sum over the function's outermost loop (the backward branch
                                               with the longest span: in gdn_chunk_fused, one chunk step of the
                                               fused pass), minus the `cold` blocks; nozfill: also minus the blocks of
                                               zero-filling LDGSTS that end in an unconditional BRA (the partial-
                                               chunk copies beside load_tile_async_at's full-chunk ones)
`@!PT` instructions (never executed; ptxas pads LDGSTS with them) are not counted.
Classes: HMMA, LDSM, LDS, STS, GMEM (LDG/LDGSTS/STG/DEPBAR), RED, SHFL, CTRL (BRA/BSSY/BSYNC/BAR/...), FP, INT
(integer, address, predicate and move work, uniform datapath included), OTHER:op.
Static counts are not timings: a path's count is what one warp issues on it, not what the profiler measures.
"""
import collections
import re
import sys

_INT = {'IMAD', 'IADD3', 'S2UR', 'LEA', 'SHF', 'LOP3', 'ISETP', 'IABS', 'IMNMX', 'SEL', 'PRMT', 'MOV', 'S2R', 'CS2R', 'LDC',
        'VIADD', 'FLO', 'POPC', 'BMSK', 'SGXT', 'PLOP3', 'P2R', 'R2P', 'I2F', 'F2I', 'VIMNMX', 'IADD', 'IMUL', 'VOTE',
        'I2FP', 'F2IP'}
_FP = {'FFMA', 'FADD', 'FMUL', 'FSEL', 'FSETP', 'MUFU', 'F2F', 'FMNMX', 'F2FP', 'HADD2', 'HFMA2', 'HMUL2', 'FCHK'}
_CTRL = {'BRA', 'BSSY', 'BSYNC', 'EXIT', 'RET', 'CALL', 'WARPSYNC', 'BAR', 'JMP', 'BREAK', 'YIELD', 'NOP'}
_GMEM = {'LDG', 'LDGSTS', 'STG', 'LDGDEPBAR', 'DEPBAR'}


def op_class(op):
    base = op.split('.')[0]
    if base in ('HMMA', 'LDSM', 'STSM', 'STS', 'LDS', 'SHFL'):
        return base
    if base in _GMEM:
        return 'GMEM'
    if base in ('RED', 'ATOM', 'REDG', 'ATOMG', 'REDUX'):
        return 'RED'
    if base in _CTRL:
        return 'CTRL'
    if base in _INT or base.startswith('U'):
        return 'INT'
    if base in _FP:
        return 'FP'
    return 'OTHER:' + base


def parse(path):
    funcs, cur = collections.OrderedDict(), None
    for line in open(path):
        m = re.match(r'^\.text\.(\S+):', line)
        if m:
            cur = m.group(1)
            funcs[cur] = []
            continue
        if cur is None:
            continue
        m = re.match(r'^(\.L_x_\d+):', line)
        if m:
            funcs[cur].append(('L', m.group(1)))
            continue
        m = re.match(r'^\s+/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)\s*(.*?);', line)
        if m and (m.group(2) or '').strip() == '@!PT':
            continue
        if m:
            funcs[cur].append(('I', int(m.group(1), 16), (m.group(2) or '').strip(), m.group(3), m.group(4)))
    return funcs


def blocks(ins):
    out, cur, lab = [], None, None
    for x in ins:
        if x[0] == 'L':
            if cur:
                out.append(cur)
            cur, lab = None, x[1]
            continue
        if cur is None:
            cur, lab = {'label': lab, 'addr': x[1], 'ins': []}, None
        cur['ins'].append(x)
        if x[3].startswith(('BRA', 'EXIT', 'RET', 'JMP')):
            out.append(cur)
            cur = None
    if cur:
        out.append(cur)
    return out


def fmt(c):
    return 'total %d: ' % sum(c.values()) + ' '.join('%s %d' % kv for kv in sorted(c.items()))


def main(argv):
    if len(argv) < 3 or argv[1] in ('-h', '--help'):
        print(__doc__)
        return 0 if len(argv) > 1 and argv[1] in ('-h', '--help') else 2
    funcs = parse(argv[1])
    name = [f for f in funcs if argv[2] in f][0]
    lo = int(argv[3], 16) if len(argv) > 3 and not argv[3].startswith('-') else 0
    hi = int(argv[4], 16) if len(argv) > 4 and not argv[3].startswith('-') else 1 << 40
    if '--loop' in argv:
        ins = [x for x in funcs[name] if x[0] == 'I']
        labels, pos = {}, None
        for x in funcs[name]:
            if x[0] == 'L':
                pos = x[1]
            elif pos is not None:
                labels[pos] = x[1]
                pos = None
        best = None
        for x in ins:
            m = re.search(r'`\((\.L_x_\d+)\)', x[4]) if x[3].startswith('BRA') else None
            if m and m.group(1) in labels and labels[m.group(1)] < x[1]:
                span = (labels[m.group(1)], x[1] + 0x10)
                if best is None or span[1] - span[0] > best[1] - best[0]:
                    best = span
        opt = dict(a.split('=') for a in argv[3:] if '=' in a)
        cold = {int(x, 16) for x in opt.get('cold', '').split(',') if x}
        hot, skipped = collections.Counter(), []
        for b in blocks(funcs[name]):
            if not best[0] <= b['addr'] < best[1]:
                continue
            # The partial-tile copy path of load_tile_async_at<.., false> (a block of zero-filling LDGSTS, the
            # ones with a predicate operand, that jumps over the full-tile copies): cold, a segment's last chunk.
            zfill = any(i[3].startswith('LDGSTS') and re.search(r',\s*!?P\d\s*$', i[4]) for i in b['ins'])
            last = b['ins'][-1]
            if b['addr'] in cold or ('nozfill' in argv and zfill and last[3] == 'BRA' and not last[2]):
                skipped.append('%05x' % b['addr'])
                continue
            hot.update(op_class(i[3]) for i in b['ins'])
        print('loop %05x-%05x' % best, fmt(hot), '(cold: %s)' % ','.join(skipped) if skipped else '')
        return
    if '--hot' in argv:
        opt = dict(a.split('=') for a in argv[5:] if '=' in a)
        cold = {int(x, 16) for x in opt.get('cold', '').split(',') if x}
        rows = {int(x, 16) for x in opt.get('rows', '').split(',') if x}
        hot, rw = collections.Counter(), collections.Counter()
        for b in blocks(funcs[name]):
            if lo <= b['addr'] < hi and b['addr'] not in cold:
                (rw if b['addr'] in rows else hot).update(op_class(i[3]) for i in b['ins'])
        print('every warp ', fmt(hot))
        print('rows blocks', fmt(rw))
        return
    for b in blocks(funcs[name]):
        if lo <= b['addr'] < hi:
            c = collections.Counter(op_class(i[3]) for i in b['ins'])
            last = b['ins'][-1]
            print('%05x %-10s n=%4d %s | %s %s %s' % (b['addr'], b['label'] or '', len(b['ins']),
                                                       ' '.join('%s:%d' % kv for kv in sorted(c.items())), last[2],
                                                       last[3], last[4] if last[3].startswith('BRA') else ''))


if __name__ == '__main__':
    sys.exit(main(sys.argv))
