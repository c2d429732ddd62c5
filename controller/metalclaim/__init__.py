"""metalclaim: HostClaims on bare metal over Redfish - the controller and the media server.

That is all the wheel holds. The development environment, the test helpers and the bench's helpers are a package
of their own in the checkout (`metalclaim_dev`, devtools/); nothing in this package looks for the checkout.
"""
