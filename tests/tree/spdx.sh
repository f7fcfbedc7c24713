# SPDX-License-Identifier: BSD-3-Clause
# Every source, script and build file of the tree carries "SPDX-License-Identifier: BSD-3-Clause" (LICENSE).
set -u
top=${TOP_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
[ -f "$top/LICENSE" ] || { echo "FAIL: spdx: no LICENSE at the top of the tree"; exit 1; }
grep -q '^BSD 3-Clause License$' "$top/LICENSE" || { echo "FAIL: spdx: LICENSE is not the BSD-3-Clause text"; exit 1; }
exec "$top/scripts/spdx" --check
