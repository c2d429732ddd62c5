# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The provisioner's defaults, written once.

machine.Settings and bmh_redfish's argument spec take them from here (its DOCUMENTATION states the same values:
ansible-test checks them against the argument spec, tests/unit/plugins/modules/test_bmh_redfish.py against these);
the provisioner role passes callback_timeout and power_poll_interval only when set, so these are its defaults too.
The controller says callback_events only when it watches the callbacks (it has a media directory).
"""

from __future__ import annotations

CALLBACK_TIMEOUT = 1800.0  # seconds the image writer has to call back once a deploy or cleaning started
POWER_POLL_INTERVAL = 60.0  # a settled host's power is read again after this long
POWER_OFF_TIMEOUT = 60.0  # a soft power-off gets this long before a hard one
BACKOFF_BASE = 10.0  # seconds to wait after a first error, doubled after each further one
BACKOFF_CAP = 600.0  # the longest wait between retries
CLEANING_ERASE = "metadata"  # how deep automated cleaning goes: "metadata" or "full"
# A warm host's writer polls for its job every second: one that has not taken a job handed to it within this long has
# stopped answering, and the deploy falls back to booting the deploy ISO.
WARM_PICKUP_TIMEOUT = 20.0
# While an image writer works, its host is looked at again this often for its callback: only a poll can tell that it
# called back when nothing else wakes the provisioner (a playbook run by hand)...
CALLBACK_POLL = 5.0
# ...and this often when its caller is woken by the callback itself (callback_events: the controller watches the media
# directory's callbacks), a safety net then; a timeout falling due sooner is looked at when it does.
CALLBACK_EVENTS_POLL = 60.0
# A live ISO booting: its power is read again after a third of the time since it was powered, within these bounds: every
# 2 s through the few seconds most BMCs take (never later than a fixed 2 s poll there), less often the longer a BMC
# takes (a real server's power-on self-test takes a minute or more: about 18 reads for two minutes instead of 60), and
# seen On at most 10 s late then.
BOOT_POLL_MIN = 2.0  # also the first read after powering it (and each read when the power-on time was not recorded)
BOOT_POLL_MAX = 10.0
BOOT_POLL_FRACTION = 1 / 3
