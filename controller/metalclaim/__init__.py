"""metalclaim: HostClaims on bare metal over Redfish - the controller and the media server.

The development environment (`metalclaim.devenv`) lives in the checkout only, and only it knows where the
checkout is; nothing in the installed package looks for it.
"""
